/*
 * rt allreduce: its endpoints and the check of its configuration (every build, and the GPU
 * backend module). The NCCL implementation is allreduce_nccl.c, reached through gpu_calls.c.
 */
#include "worker/transport/allreduce.h"

#include <string.h>

#include "worker/transport/nccl_endpoint.h"
#include "worker/transport/transport.h"

#define REDUCE_EP_V1 RT_REDUCE_SCHEME "v1/"
#define REDUCE_EP_FORM RT_REDUCE_SCHEME "v1/<256 hex digits>"

sc_status rt_reduce_endpoint_format(const unsigned char *id, char *buf, size_t size, sc_err *err)
{
    size_t plen = strlen(REDUCE_EP_V1), need = plen + 2 * RT_NCCL_ID_BYTES + 1;
    if (id == NULL || buf == NULL || size < need)
        return SC_ERRF(err, SC_ERR_INVALID, "all-reduce endpoint: %zu bytes of room, %zu needed",
                       buf == NULL ? 0 : size, need);
    memcpy(buf, REDUCE_EP_V1, plen);
    rt_hex_put(id, buf + plen);
    buf[need - 1] = '\0';
    return SC_OK;
}

sc_status rt_reduce_endpoint_parse(const char *ep, unsigned char *id, sc_err *err)
{
    size_t slen = strlen(RT_REDUCE_SCHEME), plen = strlen(REDUCE_EP_V1);
    if (ep == NULL || strncmp(ep, RT_REDUCE_SCHEME, slen) != 0)
        return SC_ERRF(err, SC_ERR_INVALID, "all-reduce endpoint \"%.80s\": expected %s",
                       ep != NULL ? ep : "(null)", REDUCE_EP_FORM);
    if (strncmp(ep, REDUCE_EP_V1, plen) != 0)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "all-reduce endpoint \"%.80s\": unknown format version (this build reads "
                       "v1: %s)",
                       ep, REDUCE_EP_FORM);
    const char *p = ep + plen;
    size_t len = strlen(p);
    if (len != 2 * RT_NCCL_ID_BYTES)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "all-reduce endpoint \"%.60s...\": %zu characters after \"%s\", expected "
                       "%d hex digits",
                       ep, len, REDUCE_EP_V1, 2 * RT_NCCL_ID_BYTES);
    unsigned char tmp[RT_NCCL_ID_BYTES];
    size_t bad = 0;
    if (rt_hex_get(p, tmp, &bad) != 0)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "all-reduce endpoint: character %zu of the id is '%c', not a hex digit", bad,
                       p[bad]);
    memcpy(id, tmp, sizeof tmp);
    return SC_OK;
}

sc_status rt_allreduce_cfg_check(const rt_allreduce_cfg *cfg, sc_err *err)
{
    if (cfg->ranks < 2 || cfg->rank < 0 || cfg->rank >= cfg->ranks)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "replica all-reduce: copy %d of %d; valid: at least 2 copies, the copy "
                       "0..copies-1",
                       cfg->rank, cfg->ranks);
    if (cfg->timeout_ms <= 0)
        return SC_ERRF(err, SC_ERR_INVALID, "replica all-reduce: timeout_ms must be > 0, got %d",
                       cfg->timeout_ms);
    return SC_OK;
}
