/*
 * coord transport pick: the rules of transport_pick.h.
 * Not here: reading the registry or the plan (jobs_transports.c builds the sites), telling the
 * workers.
 */
#include "coordinator/transport_pick.h"

#include <string.h>

#include "common/sc_util.h"

static void say(char *why, size_t size, const char *text)
{
    if (why != NULL && size > 0)
        sc_strlcpy(why, text, size);
}

static bool nonempty(const char *s)
{
    return s != NULL && s[0] != '\0';
}

/* Same physical GPU: the same PCI bus id when both are known, else the same host and index. */
static bool same_gpu(const coord_stage_site *a, const coord_stage_site *b)
{
    if (nonempty(a->pci_bus_id) && nonempty(b->pci_bus_id) &&
        strcmp(a->host != NULL ? a->host : "", b->host != NULL ? b->host : "") == 0)
        return strcmp(a->pci_bus_id, b->pci_bus_id) == 0;
    return a->device == b->device &&
           strcmp(a->host != NULL ? a->host : "", b->host != NULL ? b->host : "") == 0;
}

bool coord_boundary_nccl_ok(const coord_stage_site *a, const coord_stage_site *b, char *why,
                            size_t why_size)
{
    if (!a->cuda || !b->cuda) {
        say(why, why_size, "a stage runs on a CPU");
        return false;
    }
    if (!a->nccl || !b->nccl) {
        say(why, why_size, "a worker's build has no NCCL (its hardware report does not offer it)");
        return false;
    }
    if (a->replicas != 1 || b->replicas != 1) {
        say(why, why_size, "a stage is replicated (nccl links single copies only)");
        return false;
    }
    if (same_gpu(a, b)) {
        say(why, why_size, "both stages are on the same GPU (NCCL needs distinct devices)");
        return false;
    }
    say(why, why_size, "");
    return true;
}

bool coord_replicas_nccl_ok(const coord_stage_site *copies, size_t n, char *why, size_t why_size)
{
    if (n < 2) {
        say(why, why_size, "the stage has a single copy (nothing to all-reduce)");
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (!copies[i].cuda) {
            say(why, why_size, "a copy runs on a CPU");
            return false;
        }
        if (!copies[i].nccl) {
            say(why, why_size,
                "a copy's worker has no NCCL (its hardware report does not offer it)");
            return false;
        }
        for (size_t j = 0; j < i; j++)
            if (same_gpu(&copies[i], &copies[j])) {
                say(why, why_size, "two copies are on the same GPU (NCCL needs distinct devices)");
                return false;
            }
    }
    say(why, why_size, "");
    return true;
}

/* Stage s takes part in a routed group (it or a neighbour is replicated): zmq on both sides. */
static bool routed(const coord_stage_site *sites, size_t n, size_t s)
{
    for (size_t k = s > 0 ? s - 1 : 0; k <= s + 1 && k < n; k++)
        if (sites[k].replicas != 1)
            return true;
    return false;
}

sc_status coord_transport_pick(const char *pref, const coord_stage_site *sites, size_t n,
                               const char **kinds, sc_err *err)
{
    if (pref == NULL)
        pref = "auto";
    bool force = strcmp(pref, "nccl") == 0, never = strcmp(pref, "zmq") == 0;
    if (!force && !never && strcmp(pref, "auto") != 0)
        return SC_ERRF(err, SC_ERR_INVALID, "transport \"%s\": valid: \"auto\", \"zmq\", \"nccl\"",
                       pref);
    for (size_t b = 0; b + 1 < n; b++) {
        kinds[b] = "zmq";
        if (never)
            continue;
        char why[128];
        bool ok = coord_boundary_nccl_ok(&sites[b], &sites[b + 1], why, sizeof why);
        if (ok && (routed(sites, n, b) || routed(sites, n, b + 1))) {
            ok = false;
            sc_strlcpy(why, "a neighbouring stage is replicated (its messages are routed over zmq)",
                       sizeof why);
        }
        if (ok)
            kinds[b] = "nccl";
        else if (force)
            return SC_ERRF(err, SC_ERR_UNSUPPORTED,
                           "transport \"nccl\": the boundary between stages %zu and %zu "
                           "cannot use it: %s; use \"auto\" or \"zmq\"",
                           b, b + 1, why);
    }
    return SC_OK;
}

void coord_transport_of_stage(const char *const *kinds, size_t n, size_t s, const char **transport,
                              const char **transport_next)
{
    *transport = "zmq";
    *transport_next = "";
    if (n < 2 || s >= n)
        return;
    const char *prev = s > 0 ? kinds[s - 1] : NULL, *next = s + 1 < n ? kinds[s] : NULL;
    *transport = prev != NULL ? prev : next;
    if (prev != NULL && next != NULL && strcmp(prev, next) != 0)
        *transport_next = next;
}
