/* What the unit tests that measure how threads share a CPU need to know of
 * the machine: whether other work competes for its CPUs right now. Those
 * tests assert their shares only while it does not; on a busy machine the
 * same shares are scheduler noise, and the test says so instead. */
#ifndef DS_TESTS_UNIT_MACHINE_H
#define DS_TESTS_UNIT_MACHINE_H

#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

/* True when the machine has more runnable threads than CPUs, as
 * ds__spin_cpus_wanted sees it. */
static inline bool machine_busy(void)
{
    char b[128];
    FILE *f = fopen("/proc/loadavg", "r");
    if (f == NULL) return false;
    long running = 0;
    bool busy = fgets(b, sizeof(b), f) && sscanf(b, "%*s %*s %*s %ld/", &running) == 1 &&
                running > sysconf(_SC_NPROCESSORS_ONLN);
    fclose(f);
    return busy;
}

#endif
