/*
 * nccl endpoints: the text form of a stage's NCCL unique ids ("nccl://v1/<A>/<G>", see
 * nccl_endpoint.h) and the hex coding of an id that the replicas' all-reduce endpoint shares.
 * Built in every configuration (CPU-only ones too): the coordinator and the tests read and write
 * these endpoints without NCCL. Not here: creating ids or communicators (transport_nccl.c).
 * Invariant: rt_nccl_endpoint_parse accepts exactly what rt_nccl_endpoint_format writes.
 */
#include "worker/transport/nccl_endpoint.h"

#include <string.h>

#include "common/sc_status.h"

#define NCCL_EP_PREFIX "nccl://"
#define NCCL_EP_V1 "nccl://v1/"
#define NCCL_EP_FORM "nccl://v1/<256 hex digits>/<256 hex digits> or nccl://v1/-"

bool rt_endpoint_is_nccl(const char *ep)
{
    return ep != NULL && strncmp(ep, NCCL_EP_PREFIX, strlen(NCCL_EP_PREFIX)) == 0;
}

void rt_hex_put(const unsigned char *id, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < RT_NCCL_ID_BYTES; i++) {
        out[2 * i] = digits[id[i] >> 4];
        out[2 * i + 1] = digits[id[i] & 15];
    }
}

static int hex_val(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int rt_hex_get(const char *s, unsigned char *id, size_t *bad_at)
{
    for (size_t i = 0; i < RT_NCCL_ID_BYTES; i++) {
        int hi = hex_val(s[2 * i]), lo = hex_val(s[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            *bad_at = 2 * i + (hi < 0 ? 0 : 1);
            return -1;
        }
        id[i] = (unsigned char)(hi << 4 | lo);
    }
    return 0;
}

sc_status rt_nccl_endpoint_format(const unsigned char *a, const unsigned char *g, char *buf,
                                  size_t size, sc_err *err)
{
    size_t plen = strlen(NCCL_EP_V1);
    size_t need = (a == NULL && g == NULL) ? plen + 2 : plen + 4 * RT_NCCL_ID_BYTES + 2;
    if ((a == NULL) != (g == NULL))
        return SC_ERRF(err, SC_ERR_INVALID, "nccl endpoint: both ids or neither are needed");
    if (buf == NULL || size < need)
        return SC_ERRF(err, SC_ERR_INVALID, "nccl endpoint: %zu bytes of room, %zu needed", size,
                       need);
    memcpy(buf, NCCL_EP_V1, plen);
    if (a == NULL) {
        buf[plen] = '-';
        buf[plen + 1] = '\0';
        return SC_OK;
    }
    char *p = buf + plen;
    rt_hex_put(a, p);
    p += 2 * RT_NCCL_ID_BYTES;
    *p++ = '/';
    rt_hex_put(g, p);
    p += 2 * RT_NCCL_ID_BYTES;
    *p = '\0';
    return SC_OK;
}

sc_status rt_nccl_endpoint_parse(const char *ep, bool *has_ids, unsigned char *a, unsigned char *g,
                                 sc_err *err)
{
    *has_ids = false;
    if (!rt_endpoint_is_nccl(ep))
        return SC_ERRF(err, SC_ERR_INVALID, "nccl endpoint \"%.80s\": expected %s",
                       ep != NULL ? ep : "(null)", NCCL_EP_FORM);
    size_t plen = strlen(NCCL_EP_V1);
    if (strncmp(ep, NCCL_EP_V1, plen) != 0)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "nccl endpoint \"%.80s\": unknown format version (this build reads v1: "
                       "%s)",
                       ep, NCCL_EP_FORM);
    const char *p = ep + plen;
    if (strcmp(p, "-") == 0)
        return SC_OK;
    size_t hex = 2 * RT_NCCL_ID_BYTES, len = strlen(p);
    if (len != 2 * hex + 1 || p[hex] != '/')
        return SC_ERRF(err, SC_ERR_INVALID,
                       "nccl endpoint \"%.80s...\": %zu characters after \"%s\", expected %zu "
                       "(two ids of %zu hex digits separated by '/') or \"-\"",
                       ep, len, NCCL_EP_V1, 2 * hex + 1, hex);
    unsigned char ia[RT_NCCL_ID_BYTES], ig[RT_NCCL_ID_BYTES];
    size_t bad = 0;
    if (rt_hex_get(p, ia, &bad) != 0)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "nccl endpoint: character %zu of the first id is '%c', not a hex digit", bad,
                       p[bad]);
    if (rt_hex_get(p + hex + 1, ig, &bad) != 0)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "nccl endpoint: character %zu of the second id is '%c', not a hex digit",
                       bad, p[hex + 1 + bad]);
    memcpy(a, ia, sizeof ia);
    memcpy(g, ig, sizeof ig);
    *has_ids = true;
    return SC_OK;
}
