/* Helpers with no policy; see sc_util.h. */
#include "common/sc_util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

size_t sc_strlcpy(char *dst, const char *src, size_t size)
{
    size_t len = strlen(src);
    if (size > 0) {
        size_t n = len < size - 1 ? len : size - 1;
        memcpy(dst, src, n);
        dst[n] = '\0';
    }
    return len;
}

size_t sc_strfmt(char *dst, size_t size, const char *fmt, ...)
{
    if (size == 0)
        return 0;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(dst, size, fmt, ap);
    va_end(ap);
    if (n < 0) {
        dst[0] = '\0';
        return 0;
    }
    return (size_t)n < size ? (size_t)n : size - 1;
}

sc_status sc_file_read(const char *path, size_t max_bytes, char **out, size_t *len, sc_err *err)
{
    *out = NULL;
    if (len)
        *len = 0;
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return SC_ERRF(err, SC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    if (buf == NULL) {
        fclose(f);
        return SC_ERRF(err, SC_ERR_NOMEM, "%s: out of memory", path);
    }
    for (;;) {
        if (n == cap) {
            if (cap > max_bytes)
                break;
            size_t ncap = cap * 2;
            char *nbuf = realloc(buf, ncap + 1);
            if (nbuf == NULL) {
                free(buf);
                fclose(f);
                return SC_ERRF(err, SC_ERR_NOMEM, "%s: out of memory", path);
            }
            buf = nbuf;
            cap = ncap;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    int read_error = ferror(f) ? errno : 0;
    fclose(f);
    if (read_error) {
        free(buf);
        if (read_error == EISDIR)
            return SC_ERRF(err, SC_ERR_IO, "%s: is a directory, expected a file", path);
        return SC_ERRF(err, SC_ERR_IO, "%s: read error: %s", path, strerror(read_error));
    }
    if (n > max_bytes) {
        free(buf);
        return SC_ERRF(err, SC_ERR_TOO_LARGE, "%s: larger than the %zu-byte limit", path,
                       max_bytes);
    }
    buf[n] = '\0';
    *out = buf;
    if (len)
        *len = n;
    return SC_OK;
}

sc_status sc_parse_int64(const char *s, int64_t min, int64_t max, const char *what, int64_t *out,
                         sc_err *err)
{
    if (s == NULL || *s == '\0')
        return SC_ERRF(err, SC_ERR_INVALID, "%s: empty value; expected an integer in [%lld, %lld]",
                       what, (long long)min, (long long)max);
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return SC_ERRF(err, SC_ERR_INVALID, "%s: '%s' is not an integer in [%lld, %lld]", what, s,
                       (long long)min, (long long)max);
    *out = v;
    return SC_OK;
}

sc_status sc_parse_double(const char *s, double min, double max, const char *what, double *out,
                          sc_err *err)
{
    if (s == NULL || *s == '\0')
        return SC_ERRF(err, SC_ERR_INVALID, "%s: empty value; expected a number in [%g, %g]", what,
                       min, max);
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || *end != '\0' || !isfinite(v) || v < min || v > max)
        return SC_ERRF(err, SC_ERR_INVALID, "%s: '%s' is not a number in [%g, %g]", what, s, min,
                       max);
    *out = v;
    return SC_OK;
}

sc_status sc_parse_hostport(const char *s, bool port_zero_ok, const char *what, char *host,
                            size_t host_size, int *port, sc_err *err)
{
    int lo = port_zero_ok ? 0 : 1;
    const char *zero = port_zero_ok ? " (0 picks a free one)" : "";
    if (s == NULL || *s == '\0')
        return SC_ERRF(err, SC_ERR_INVALID,
                       "%s: empty value; expected HOST:PORT with a port in [%d, 65535]%s", what, lo,
                       zero);
    const char *colon = strrchr(s, ':');
    if (colon == NULL)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "%s '%s': expected HOST:PORT with a port in [%d, 65535]%s", what, s, lo,
                       zero);
    size_t hl = (size_t)(colon - s);
    if (hl == 0)
        return SC_ERRF(err, SC_ERR_INVALID, "%s '%s': the host is empty; expected HOST:PORT", what,
                       s);
    for (const char *p = s; p < colon; p++)
        if (isspace((unsigned char)*p) || iscntrl((unsigned char)*p))
            return SC_ERRF(err, SC_ERR_INVALID, "%s '%s': the host contains white space", what, s);
    /* a ':' inside the host is an IPv6 address: it needs brackets, or the port is ambiguous */
    bool bracketed = s[0] == '[' && colon[-1] == ']';
    if (memchr(s, ':', hl) != NULL && !bracketed)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "%s '%s': an IPv6 host goes in brackets, as in [::1]:7070", what, s);
    if (bracketed && hl == 2)
        return SC_ERRF(err, SC_ERR_INVALID, "%s '%s': the host is empty; expected HOST:PORT", what,
                       s);
    /* digits only: strtoll alone would take a sign, leading blanks or "0x" */
    const char *ps = colon + 1;
    bool digits = *ps != '\0' && strlen(ps) <= 5;
    for (const char *p = ps; digits && *p; p++)
        digits = *p >= '0' && *p <= '9';
    long v = digits ? strtol(ps, NULL, 10) : -1;
    if (!digits || v < lo || v > 65535)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "%s '%s': the port '%s' is not an integer in [%d, 65535]%s", what, s, ps, lo,
                       zero);
    if (host != NULL) {
        if (hl >= host_size)
            return SC_ERRF(err, SC_ERR_INVALID, "%s '%s': the host is longer than %zu characters",
                           what, s, host_size - 1);
        memcpy(host, s, hl);
        host[hl] = '\0';
    }
    if (port != NULL)
        *port = (int)v;
    return SC_OK;
}

sc_status sc_lock_file(const char *path, int *fd, long *holder_pid, sc_err *err)
{
    *fd = -1;
    *holder_pid = 0;
    int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (f < 0)
        return SC_ERRF(err, SC_ERR_IO, "cannot open the lock file %s: %s", path, strerror(errno));
    if (flock(f, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char text[32];
        ssize_t got = pread(f, text, sizeof text - 1, 0);
        text[got > 0 ? got : 0] = '\0';
        *holder_pid = strtol(text, NULL, 10);
        close(f);
        if (e == EWOULDBLOCK)
            return SC_ERRF(err, SC_ERR_EXISTS, "%s is held by another process", path);
        return SC_ERRF(err, SC_ERR_IO, "cannot lock %s: %s", path, strerror(e));
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    /* best effort: the lock holds without it, only a message naming the holder lacks the pid */
    bool wrote = ftruncate(f, 0) == 0 && pwrite(f, pid, (size_t)n, 0) == n;
    (void)wrote;
    *fd = f;
    return SC_OK;
}
