/*
 * Monotonic clock. Never goes backwards, unaffected by wall-clock changes; use it for
 * timeouts, deadlines and measured durations. Wall-clock time is only for logs.
 */
#ifndef SC_CLOCK_H
#define SC_CLOCK_H

#include <stdint.h>

/* Nanoseconds since an arbitrary fixed point (CLOCK_MONOTONIC). */
uint64_t sc_clock_now_ns(void);

/* Same clock, in seconds. */
double sc_clock_now_s(void);

/* Sleeps for `ms` milliseconds, resuming after signals. */
void sc_clock_sleep_ms(uint64_t ms);

#endif /* SC_CLOCK_H */
