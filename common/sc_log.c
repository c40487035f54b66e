/*
 * Logging: one mutex-protected write per line, so lines from several threads never interleave.
 * The level is an atomic read on the hot path; STAGECRAFT_LOG is parsed once.
 */
#include "common/sc_log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static atomic_int log_level = -1; /* -1: not yet read from the environment */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static const char level_char[] = {'E', 'W', 'I', 'D', 'T'};
/* the kept lines (sc_log_keep_lines): set once, then only read */
static _Atomic(sc_logring *) log_ring = NULL;
static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

bool sc_log_level_parse(const char *name, sc_log_level *out)
{
    for (int i = 0; i <= SC_LOG_TRACE; i++) {
        if (name != NULL && strcasecmp(name, level_names[i]) == 0) {
            *out = (sc_log_level)i;
            return true;
        }
    }
    return false;
}

sc_log_level sc_log_get_level(void)
{
    int lvl = atomic_load(&log_level);
    if (lvl < 0) {
        sc_log_level parsed = SC_LOG_INFO;
        const char *env = getenv("STAGECRAFT_LOG");
        if (env != NULL && !sc_log_level_parse(env, &parsed))
            fprintf(stderr, "stagecraft: STAGECRAFT_LOG=%s is not a log level "
                            "(valid: error, warn, info, debug, trace); using info\n", env);
        int expected = -1;
        atomic_compare_exchange_strong(&log_level, &expected, (int)parsed);
        lvl = atomic_load(&log_level);
    }
    return (sc_log_level)lvl;
}

void sc_log_set_level(sc_log_level level)
{
    atomic_store(&log_level, (int)level);
}

sc_status sc_log_keep_lines(size_t lines, sc_err *err)
{
    if (atomic_load(&log_ring) != NULL)
        return SC_OK;
    sc_logring *r = NULL;
    SC_CHECK(sc_logring_new(&r, lines, err));
    sc_logring *none = NULL;
    if (!atomic_compare_exchange_strong(&log_ring, &none, r))
        sc_logring_destroy(&r);
    return SC_OK;
}

sc_logring *sc_log_ring(void)
{
    return atomic_load(&log_ring);
}

bool sc_log_enabled(sc_log_level level)
{
    return level <= sc_log_get_level();
}

void sc_logv(sc_log_level level, const char *component, const char *fmt, va_list ap)
{
    if (!sc_log_enabled(level))
        return;
    char line[2048];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %c [%s] ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000L, level_char[level],
                     component ? component : "-");
    if (n < 0)
        return;
    if ((size_t)n < sizeof line)
        vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    size_t len = strlen(line);
    if (len + 1 < sizeof line) {
        line[len] = '\n';
        line[len + 1] = '\0';
    } else {
        line[sizeof line - 2] = '\n';
    }
    pthread_mutex_lock(&log_lock);
    fputs(line, stderr);
    fflush(stderr);
    /* under log_lock: the ring's order is stderr's */
    sc_logring *ring = atomic_load(&log_ring);
    if (ring != NULL)
        sc_logring_push(ring, line);
    pthread_mutex_unlock(&log_lock);
}

void sc_log(sc_log_level level, const char *component, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sc_logv(level, component, fmt, ap);
    va_end(ap);
}
