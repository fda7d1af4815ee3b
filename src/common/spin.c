/* Adaptive polling window (spin.h says the rules). */
#include "common/spin.h"

void ds__spin_done(ds_spin_t *s, uint64_t idle_ns, bool contended)
{
    if (s->max_ns == 0) return;
    uint64_t w = s->window_ns;
    if (contended)
        w /= 4;
    else if (idle_ns <= w)
        return; /* caught while polling */
    else if (idle_ns <= s->max_ns)
        w = w ? w * 2 : DS_SPIN_START_NS;
    else
        w /= 2;
    if (w > s->max_ns) w = s->max_ns;
    s->window_ns = w < DS_SPIN_MIN_NS ? 0 : w;
}
