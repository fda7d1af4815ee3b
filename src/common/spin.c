/* Adaptive polling window (spin.h says the rules). */
#include "common/spin.h"

#include "common/clock.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

/* No wait of this process polls before this time: a CPU had other work. */
static _Atomic uint64_t calm_until;

uint64_t ds__spin_window(const ds_spin_t *s, uint64_t now_ns)
{
    if (s->window_ns == 0 || now_ns < atomic_load_explicit(&calm_until, memory_order_relaxed))
        return 0;
    return s->window_ns;
}

void ds__spin_done(ds_spin_t *s, uint64_t idle_ns, bool contended)
{
    if (s->max_ns == 0) return;
    uint64_t w = s->window_ns;
    if (contended) {
        w /= 4;
        atomic_store_explicit(&calm_until, ds__now_ns() + DS_SPIN_BACKOFF_NS, memory_order_relaxed);
    } else if (idle_ns <= w)
        return; /* caught while polling */
    else if (idle_ns <= s->max_ns)
        w = w ? w * 2 : DS_SPIN_START_NS;
    else
        w /= 2;
    if (w > s->max_ns) w = s->max_ns;
    s->window_ns = w < DS_SPIN_MIN_NS ? 0 : w;
}

/* /proc/loadavg ("0.52 0.58 0.59 2/80 1234"): its fourth field counts the
 * threads runnable on the whole machine right now, the reader included. */
static int loadavg_fd = -1;
static long online_cpus = 1;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static void load_open(void)
{
    loadavg_fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    online_cpus = n > 0 ? n : 1;
}

bool ds__spin_cpus_wanted(void)
{
    pthread_once(&load_once, load_open);
    char b[128];
    ssize_t n = loadavg_fd >= 0 ? pread(loadavg_fd, b, sizeof(b) - 1, 0) : -1;
    if (n <= 0) return false; /* not knowable here: the yield check still applies */
    b[n] = '\0';
    long running = 0;
    if (sscanf(b, "%*s %*s %*s %ld/", &running) != 1) return false;
    return running > online_cpus;
}

int ds__spin_move_off(int cpu)
{
    cpu_set_t allowed, other;
    if (cpu < 0 || cpu >= CPU_SETSIZE || sched_getaffinity(0, sizeof(allowed), &allowed) != 0)
        return -1;
    other = allowed;
    CPU_CLR(cpu, &other);
    if (CPU_COUNT(&other) == 0 || sched_setaffinity(0, sizeof(other), &other) != 0) return -1;
    (void)sched_setaffinity(0, sizeof(allowed), &allowed);
    int now = sched_getcpu();
    return now == cpu ? -1 : now;
}

/* This thread's involuntary context switches so far: another thread took
 * its CPU (a yield that switched counts too); -1 when unknown. */
static long thread_nivcsw(void)
{
    struct rusage r;
    return getrusage(RUSAGE_THREAD, &r) == 0 ? r.ru_nivcsw : -1;
}

/* The count at the end of this thread's previous poll step (-1: none to
 * compare with): a step compares against it, so that a preemption anywhere
 * in the step counts, not only one in the yield. */
static _Thread_local long seen = -1;

/* The machine-wide check of poll step number step: it stops polling only
 * once it has found the machine over-busy at every check for
 * DS_SPIN_OVER_NS, so that a thread runnable for a moment (a kernel
 * worker, a timer, an agent of the host) does not. over_since: when this
 * thread's checks began to find it so (0: the last did not); last: its
 * previous check. */
static bool machine_wanted(unsigned step)
{
    static _Thread_local uint64_t over_since, last;
    if (step % DS_SPIN_LOAD_EVERY != 0) return false;
    uint64_t t = ds__now_ns();
    bool wanted = false;
    if (!ds__spin_cpus_wanted())
        over_since = 0;
    else if (over_since == 0 || t - last > DS_SPIN_OVER_NS)
        over_since = t;
    else
        wanted = t - over_since >= DS_SPIN_OVER_NS;
    last = t;
    if (wanted) over_since = 0;
    return wanted;
}

bool ds__spin_pause(unsigned step, uint64_t *now_ns)
{
    bool wanted = machine_wanted(step);
    if (wanted) {
        seen = -1;
    } else {
        long before = step == 0 || seen < 0 ? thread_nivcsw() : seen;
        sched_yield();
        seen = thread_nivcsw();
        wanted = before >= 0 && seen >= 0 && seen != before;
    }
    if (now_ns) *now_ns = ds__now_ns();
    return wanted;
}

bool ds__spin_pause_beside(unsigned step, uint64_t *now_ns)
{
    seen = -1; /* a later ds__spin_pause step has no count to compare with */
    if (!machine_wanted(step)) return ds__spin_yield(now_ns);
    if (now_ns) *now_ns = ds__now_ns();
    return true;
}

/* The yield alone is timed: a neighbour that ran for less than
 * DS_SPIN_HOG_NS, or the hypervisor holding the vCPU (no switch of this
 * thread), does not count. */
bool ds__spin_yield(uint64_t *now_ns)
{
    long before = thread_nivcsw();
    uint64_t t0 = ds__now_ns();
    sched_yield();
    uint64_t t1 = ds__now_ns();
    if (now_ns) *now_ns = t1;
    if (t1 - t0 < DS_SPIN_HOG_NS) return false;
    long after = thread_nivcsw();
    return before >= 0 && after >= 0 && after != before;
}
