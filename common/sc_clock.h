/*
 * Monotonic clock. Never goes backwards, unaffected by wall-clock changes; use it for
 * timeouts, deadlines and measured durations. Wall-clock time (sc_clock_unix_ms) is only for
 * logs, records and ids that must differ across restarts.
 */
#ifndef SC_CLOCK_H
#define SC_CLOCK_H

#include <stdint.h>

/* Nanoseconds since an arbitrary fixed point (CLOCK_MONOTONIC). */
uint64_t sc_clock_now_ns(void);

/* Same clock, in seconds. */
double sc_clock_now_s(void);

/* CPU seconds the calling thread has used (CLOCK_THREAD_CPUTIME_ID); 0 when unreadable. */
double sc_clock_thread_cpu_s(void);

/* CPU seconds every thread of this process has used (CLOCK_PROCESS_CPUTIME_ID); 0 when
 * unreadable. */
double sc_clock_process_cpu_s(void);

/* Wall-clock milliseconds since 1970 (CLOCK_REALTIME). */
int64_t sc_clock_unix_ms(void);

/* Sleeps for `ms` milliseconds, resuming after signals. */
void sc_clock_sleep_ms(uint64_t ms);

#endif /* SC_CLOCK_H */
