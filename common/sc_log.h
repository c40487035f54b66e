/*
 * Leveled logging with a component prefix, to stderr.
 *
 * Line format: "2026-11-22T10:31:07.123Z W [rpc] message". The level threshold comes from
 * STAGECRAFT_LOG (error, warn, info, debug, trace; default info), read once on first use, or
 * from sc_log_set_level(). Thread-safe: each line is written with one locked fputs.
 * Does not rotate or ship logs anywhere: daemons are run under systemd/Slurm/k8s, which
 * collect stderr. A daemon may also keep its newest lines in memory (sc_log_keep_lines), to hand
 * them to a caller (a worker's recent lines, as `stagecraft logs` prints them).
 */
#ifndef SC_LOG_H
#define SC_LOG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/sc_logring.h"

typedef enum {
    SC_LOG_ERROR = 0,
    SC_LOG_WARN,
    SC_LOG_INFO,
    SC_LOG_DEBUG,
    SC_LOG_TRACE,
} sc_log_level;

void sc_log_set_level(sc_log_level level);
sc_log_level sc_log_get_level(void);

/* Parses "error|warn|info|debug|trace"; false when the name is not one of them. */
bool sc_log_level_parse(const char *name, sc_log_level *out);

bool sc_log_enabled(sc_log_level level);

/* From now on every line written is also kept in a ring of the newest `lines` (sc_logring.h),
 * which lives as long as the process. Call once, before the threads that log start; a second
 * call keeps the first ring. */
sc_status sc_log_keep_lines(size_t lines, sc_err *err);

/* The ring of sc_log_keep_lines, or NULL when lines are not kept. */
sc_logring *sc_log_ring(void);

void sc_log(sc_log_level level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void sc_logv(sc_log_level level, const char *component, const char *fmt, va_list ap);

#define SC_LOG_ERROR(comp, ...) sc_log(SC_LOG_ERROR, (comp), __VA_ARGS__)
#define SC_LOG_WARN(comp, ...) sc_log(SC_LOG_WARN, (comp), __VA_ARGS__)
#define SC_LOG_INFO(comp, ...) sc_log(SC_LOG_INFO, (comp), __VA_ARGS__)
#define SC_LOG_DEBUG(comp, ...)                                                                    \
    do {                                                                                           \
        if (sc_log_enabled(SC_LOG_DEBUG))                                                          \
            sc_log(SC_LOG_DEBUG, (comp), __VA_ARGS__);                                             \
    } while (0)

#endif /* SC_LOG_H */
