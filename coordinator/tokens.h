/*
 * The coordinator's shared secrets: the join token that workers present to register and the
 * client token that submit and cancel present. Reads a token file or makes one, and compares a
 * presented token with the expected one in constant time.
 *
 * It does not decide which calls need which token (service.c does) and keeps no state.
 */
#ifndef COORD_TOKENS_H
#define COORD_TOKENS_H

#include <stdbool.h>
#include <stddef.h>

#include "common/sc_status.h"

#define COORD_TOKEN_MAX 128

/* Reads the token in file `path` (trailing newlines and spaces dropped; an empty one is
 * SC_ERR_INVALID), or, when there is no such file, creates it with 32 random hex characters
 * (mode 0600) and sets *made. `out` gets the token (at most `size` bytes with the NUL). */
sc_status coord_token_load_or_make(const char *path, char *out, size_t size, bool *made,
                                   sc_err *err);

/* Constant-time comparison of a presented token with the expected one (an empty expected token
 * matches nothing). */
bool coord_token_equal(const char *presented, const char *expected);

#endif /* COORD_TOKENS_H */
