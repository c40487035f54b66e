/*
 * Small helpers with no policy: bounded string copy, whole-file reads with a size cap,
 * checked number and address parsing for command-line values.
 */
#ifndef SC_UTIL_H
#define SC_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sc_status.h"

#define SC_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Copies at most size-1 bytes and always NUL-terminates (size > 0). Returns strlen(src), so
 * truncation is `return value >= size`. */
size_t sc_strlcpy(char *dst, const char *src, size_t size);

/* snprintf that truncates on purpose (messages, labels): always NUL-terminates; returns the
 * length written. */
size_t sc_strfmt(char *dst, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Reads a whole file into a NUL-terminated heap buffer (caller frees). Files larger than
 * `max_bytes` are refused with SC_ERR_TOO_LARGE; a missing or unreadable file is SC_ERR_IO
 * with the path and strerror in the message. */
sc_status sc_file_read(const char *path, size_t max_bytes, char **out, size_t *len, sc_err *err);

/* Opens (creating it) the file `path` and takes an exclusive, non-blocking flock on it, held
 * while *fd stays open; the kernel drops it when the process ends however it ends, so a killed
 * holder leaves no stale lock. Writes this process's id into the file. When another process
 * holds it: SC_ERR_EXISTS, *holder_pid its id as written there (0 if unreadable); other
 * failures SC_ERR_IO with the path. */
sc_status sc_lock_file(const char *path, int *fd, long *holder_pid, sc_err *err);

/* Strict number parsing for flags and environment: the whole string must be a number in
 * [min, max]. `what` names the value in the error ("--port"). Accepts 1e9-style doubles. */
sc_status sc_parse_int64(const char *s, int64_t min, int64_t max, const char *what, int64_t *out,
                         sc_err *err);
sc_status sc_parse_double(const char *s, double min, double max, const char *what, double *out,
                          sc_err *err);

/* Checks a "HOST:PORT" address as the --listen and --coordinator flags take it: a host that is
 * not empty and has no white space (an IPv6 address in brackets, "[::1]:7070") and a port that is
 * an integer in [1, 65535], or in [0, 65535] when `port_zero_ok` (an address to listen on, where
 * port 0 picks a free one). Anything else is SC_ERR_INVALID naming `what` ("--listen"), the value
 * and what is valid. On success host[host_size] gets the host as written (brackets kept) and
 * *port the port; either may be NULL. A host that does not fit host_size is SC_ERR_INVALID. */
sc_status sc_parse_hostport(const char *s, bool port_zero_ok, const char *what, char *host,
                            size_t host_size, int *port, sc_err *err);

#endif /* SC_UTIL_H */
