/*
 * Join and client tokens (see tokens.h): token files and their comparison.
 */
#include "coordinator/tokens.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sc_util.h"

bool coord_token_equal(const char *presented, const char *expected)
{
    size_t a = strlen(presented), b = strlen(expected);
    unsigned char diff = (unsigned char)(a != b);
    for (size_t i = 0; i < b; i++)
        diff |= (unsigned char)(expected[i] ^ (i < a ? presented[i] : 0));
    return diff == 0 && b > 0;
}

sc_status coord_token_load_or_make(const char *path, char *out, size_t size, bool *made,
                                   sc_err *err)
{
    char *text = NULL;
    size_t len = 0;
    *made = false;
    if (access(path, F_OK) == 0) {
        SC_CHECK(sc_file_read(path, COORD_TOKEN_MAX, &text, &len, err));
        while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' '))
            text[--len] = '\0';
        if (len == 0) {
            free(text);
            return SC_ERRF(err, SC_ERR_INVALID, "token file %s is empty", path);
        }
        sc_strlcpy(out, text, size);
        free(text);
        return SC_OK;
    }
    unsigned char raw[16];
    int fd = open("/dev/urandom", O_RDONLY);
    if (fd < 0 || read(fd, raw, sizeof raw) != (ssize_t)sizeof raw) {
        if (fd >= 0)
            close(fd);
        return SC_ERRF(err, SC_ERR_IO, "cannot read /dev/urandom to make a token");
    }
    close(fd);
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(out + 2 * i, size - 2 * i, "%02x", raw[i]);
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return SC_ERRF(err, SC_ERR_IO, "cannot create token file %s: %s", path, strerror(errno));
    size_t n = strlen(out);
    bool ok = write(fd, out, n) == (ssize_t)n && write(fd, "\n", 1) == 1;
    close(fd);
    if (!ok)
        return SC_ERRF(err, SC_ERR_IO, "cannot write token file %s", path);
    *made = true;
    return SC_OK;
}
