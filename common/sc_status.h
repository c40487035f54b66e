/*
 * sc_status: the one error vocabulary of stagecraft, and sc_err, the error record that travels
 * with it.
 *
 * Every fallible function returns an sc_status and takes an `sc_err *err` as its last argument.
 * The first error recorded wins: later sc_err_set() calls on an already-set record are ignored,
 * so the message names the root cause, not the last cleanup step. `err` may be NULL.
 * Libraries never exit(); a user's mistake becomes an sc_err with a message that names the file,
 * the field and what would be valid, a programmer's mistake an assert().
 */
#ifndef SC_STATUS_H
#define SC_STATUS_H

#include <stdarg.h>
#include <stddef.h>

/* X(name, text): the enum and its string table come from this one list. */
#define SC_STATUS_LIST(X)                                                                          \
    X(SC_OK, "ok")                                                                                 \
    X(SC_ERR_INVALID, "invalid argument")                                                          \
    X(SC_ERR_PARSE, "parse error")                                                                 \
    X(SC_ERR_NOT_FOUND, "not found")                                                               \
    X(SC_ERR_EXISTS, "already exists")                                                             \
    X(SC_ERR_IO, "i/o error")                                                                      \
    X(SC_ERR_NOMEM, "out of memory")                                                               \
    X(SC_ERR_UNSUPPORTED, "unsupported")                                                           \
    X(SC_ERR_VERSION, "version mismatch")                                                          \
    X(SC_ERR_TIMEOUT, "timed out")                                                                 \
    X(SC_ERR_TOO_LARGE, "resource exhausted")                                                      \
    X(SC_ERR_UNAVAILABLE, "unavailable")                                                           \
    X(SC_ERR_PERMISSION, "permission denied")                                                      \
    X(SC_ERR_PRECONDITION, "failed precondition")                                                  \
    X(SC_ERR_CANCELLED, "cancelled")                                                               \
    X(SC_ERR_INTERNAL, "internal error")                                                           \
    X(SC_ERR_CUDA, "cuda error")                                                                   \
    X(SC_ERR_NCCL, "nccl error")                                                                   \
    X(SC_ERR_ZMQ, "zeromq error")                                                                  \
    X(SC_ERR_GRPC, "grpc error")

typedef enum {
#define SC_STATUS_ENUM(name, text) name,
    SC_STATUS_LIST(SC_STATUS_ENUM)
#undef SC_STATUS_ENUM
        SC_STATUS_COUNT
} sc_status;

/* Short lowercase text for a status; "unknown status" for a value outside the enum. */
const char *sc_status_str(sc_status s);

/* Stable upper-case name ("SC_ERR_PARSE") for logs and tests. */
const char *sc_status_name(sc_status s);

#define SC_ERR_MSG_MAX 1024

typedef struct {
    sc_status code;
    char msg[SC_ERR_MSG_MAX];
    const char *file; /* source file that recorded the error (static string) */
    int line;
} sc_err;

/* Resets `err` to SC_OK with an empty message. Accepts NULL. */
void sc_err_clear(sc_err *err);

/* Records an error unless one is already recorded (first error wins). Returns `code`, so
 * `return SC_ERRF(err, SC_ERR_INVALID, "...")` reads naturally. Accepts a NULL err. */
sc_status sc_err_set(sc_err *err, sc_status code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
sc_status sc_err_setv(sc_err *err, sc_status code, const char *file, int line, const char *fmt,
                      va_list ap);

/* Prefixes an existing message with context ("loading plan: <old message>"). No-op if no error
 * is recorded. */
void sc_err_prefix(sc_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define SC_ERRF(err, code, ...) sc_err_set((err), (code), __FILE__, __LINE__, __VA_ARGS__)

/* SC_CHECK(expr): evaluate an sc_status expression; return it from the caller on failure. */
#define SC_CHECK(expr)                                                                             \
    do {                                                                                           \
        sc_status sc_check_rc_ = (expr);                                                           \
        if (sc_check_rc_ != SC_OK)                                                                 \
            return sc_check_rc_;                                                                   \
    } while (0)

/* SC_CHECK_GOTO(expr, label): on failure store the status in the caller's `rc` and jump to
 * `label` for cleanup (the caller declares `sc_status rc`). */
#define SC_CHECK_GOTO(expr, label)                                                                 \
    do {                                                                                           \
        rc = (expr);                                                                               \
        if (rc != SC_OK)                                                                           \
            goto label;                                                                            \
    } while (0)

/* SC_ALLOC_CHECK(ptr, err): a NULL allocation becomes SC_ERR_NOMEM, returned. */
#define SC_ALLOC_CHECK(ptr, err)                                                                   \
    do {                                                                                           \
        if ((ptr) == NULL)                                                                         \
            return SC_ERRF((err), SC_ERR_NOMEM, "out of memory allocating %s", #ptr);              \
    } while (0)

#endif /* SC_STATUS_H */
