/*
 * Helpers shared by the fuzz targets (tests/fuzz/fuzz_*.c): a NUL-terminated copy of the input,
 * the checks every target makes (a refusal carries a message; a broken invariant aborts, which
 * libFuzzer records as a crash and the corpus replay reports as a failure), and quiet logs.
 * Not here: the replay driver (replay_main.c) or any target's own parser calls.
 */
#ifndef SC_FUZZ_COMMON_H
#define SC_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_log.h"
#include "common/sc_status.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_REQUIRE(cond, ...)                                                                    \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz: %s:%d: ", __FILE__, __LINE__);                                  \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* The input as a C string (parsers of text and protobuf string fields see NUL-terminated text;
 * a NUL inside the input ends the string there for those that read no length). */
static inline char *fuzz_text(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    FUZZ_REQUIRE(s != NULL, "out of memory copying %zu bytes", size);
    if (size)
        memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* Any refusal must say what was wrong. */
static inline void fuzz_refusal(sc_status rc, const sc_err *err, const char *what)
{
    FUZZ_REQUIRE(rc == SC_OK || err->msg[0] != '\0', "%s refused (%s) without a message", what,
                 sc_status_str(rc));
}

static inline void fuzz_quiet(void)
{
    sc_log_set_level(SC_LOG_ERROR);
}

#endif /* SC_FUZZ_COMMON_H */
