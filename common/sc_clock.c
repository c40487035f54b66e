/* Monotonic clock over clock_gettime(CLOCK_MONOTONIC). */
#include "common/sc_clock.h"

#include <errno.h>
#include <time.h>

uint64_t sc_clock_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double sc_clock_now_s(void)
{
    return (double)sc_clock_now_ns() * 1e-9;
}

int64_t sc_clock_unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void sc_clock_sleep_ms(uint64_t ms)
{
    struct timespec req = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&req, &req) != 0 && errno == EINTR) {
    }
}

static double cpu_clock_s(clockid_t id)
{
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0)
        return 0;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double sc_clock_thread_cpu_s(void)
{
    return cpu_clock_s(CLOCK_THREAD_CPUTIME_ID);
}

double sc_clock_process_cpu_s(void)
{
    return cpu_clock_s(CLOCK_PROCESS_CPUTIME_ID);
}
