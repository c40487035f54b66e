/*
 * sc_status string tables and the sc_err record. No allocation: an sc_err is a plain struct
 * that callers keep on the stack.
 */
#include "common/sc_status.h"

#include <stdio.h>
#include <string.h>

static const char *const status_text[] = {
#define SC_STATUS_TEXT(name, text) text,
    SC_STATUS_LIST(SC_STATUS_TEXT)
#undef SC_STATUS_TEXT
};

static const char *const status_name[] = {
#define SC_STATUS_NAME(name, text) #name,
    SC_STATUS_LIST(SC_STATUS_NAME)
#undef SC_STATUS_NAME
};

const char *sc_status_str(sc_status s)
{
    if ((unsigned)s >= SC_STATUS_COUNT)
        return "unknown status";
    return status_text[s];
}

const char *sc_status_name(sc_status s)
{
    if ((unsigned)s >= SC_STATUS_COUNT)
        return "SC_STATUS_UNKNOWN";
    return status_name[s];
}

void sc_err_clear(sc_err *err)
{
    if (err == NULL)
        return;
    err->code = SC_OK;
    err->msg[0] = '\0';
    err->file = NULL;
    err->line = 0;
}

/* Error messages are one line of text, whatever bytes a bad input put in them: control
 * characters (a newline, a terminal escape) become '?'. */
static void one_line(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = '?';
}

sc_status sc_err_setv(sc_err *err, sc_status code, const char *file, int line, const char *fmt,
                      va_list ap)
{
    if (err == NULL || err->code != SC_OK)
        return code;
    err->code = code;
    err->file = file;
    err->line = line;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    one_line(err->msg);
    return code;
}

sc_status sc_err_set(sc_err *err, sc_status code, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sc_err_setv(err, code, file, line, fmt, ap);
    va_end(ap);
    return code;
}

static size_t sc_min_size(size_t a, size_t b)
{
    return a < b ? a : b;
}

void sc_err_prefix(sc_err *err, const char *fmt, ...)
{
    if (err == NULL || err->code == SC_OK)
        return;
    char prefix[SC_ERR_MSG_MAX];
    char old[SC_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    one_line(prefix);
    memcpy(old, err->msg, sizeof old);
    size_t n = sc_min_size(strlen(prefix), sizeof err->msg - 1);
    memcpy(err->msg, prefix, n);
    size_t room = sizeof err->msg - 1 - n;
    size_t m = sc_min_size(2, room);
    memcpy(err->msg + n, ": ", m);
    size_t k = sc_min_size(strlen(old), room - m);
    memcpy(err->msg + n + m, old, k);
    err->msg[n + m + k] = '\0';
}
