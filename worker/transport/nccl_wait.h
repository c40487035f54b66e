/*
 * Waiting on NCCL without ever waiting unboundedly, shared by the nccl transport and the
 * replicas' all-reduce (CUDA + NCCL builds only): a poll pause that grows, deadlines, and NCCL's
 * most specific error text.
 */
#ifndef RT_NCCL_WAIT_H
#define RT_NCCL_WAIT_H

#include <nccl.h>
#include <stdint.h>
#include <time.h>

#include "common/sc_clock.h"

/* Poll pause: short first (an operation usually completes within microseconds of being asked
 * for), growing to 1 ms so a long wait costs no core. Start *us at 10. */
static inline void rt_nccl_backoff(int *us)
{
    struct timespec ts = {0, (long)*us * 1000L};
    nanosleep(&ts, NULL);
    if (*us < 1000)
        *us *= 2;
}

/* The clock's value `ms` milliseconds from now. */
static inline uint64_t rt_nccl_deadline_after(int ms)
{
    return sc_clock_now_ns() + (uint64_t)ms * 1000000ull;
}

/* NCCL's last error message when it has one, else the generic text of `r`. */
static inline const char *rt_nccl_msg(ncclResult_t r)
{
    const char *last = ncclGetLastError(NULL);
    return (last != NULL && last[0] != '\0') ? last : ncclGetErrorString(r);
}

#endif /* RT_NCCL_WAIT_H */
