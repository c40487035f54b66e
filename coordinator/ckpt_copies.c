/* Where copies of a job's stage checkpoints are held (see ckpt_copies.h). */
#include "coordinator/ckpt_copies.h"

#include <stdlib.h>
#include <string.h>

void coord_ckpt_choose_holders(size_t n_stages, const int *owner, const bool *used,
                               const bool *serves, const char *const *hosts, size_t n, int k,
                               int *holders, int *count)
{
    if (k > COORD_MAX_CKPT_COPIES)
        k = COORD_MAX_CKPT_COPIES;
    int *load = calloc(n ? n : 1, sizeof *load); /* stages each worker holds copies of */
    for (size_t s = 0; s < n_stages; s++) {
        int *h = &holders[s * COORD_MAX_CKPT_COPIES];
        count[s] = 0;
        int w = owner[s];
        if (w < 0 || (size_t)w >= n)
            continue;
        /* pass 0: other hosts than the writer's; pass 1: its own host */
        for (int pass = 0; pass < 2 && count[s] < k; pass++) {
            for (size_t step = 1; step < n && count[s] < k; step++) {
                size_t i = ((size_t)w + step) % n;
                if (!used[i] || !serves[i] || load == NULL || load[i] >= COORD_MAX_CKPT_HELD)
                    continue;
                bool same = hosts == NULL || strcmp(hosts[i], hosts[w]) == 0;
                if (same == (pass == 1)) {
                    h[count[s]++] = (int)i;
                    load[i]++;
                }
            }
        }
    }
    free(load);
}

uint64_t coord_ckpt_complete(uint64_t written, size_t n_stages, const int *count,
                             const uint64_t *copied, uint64_t floor)
{
    uint64_t c = written;
    for (size_t s = 0; s < n_stages; s++)
        for (int j = 0; j < count[s]; j++)
            if (copied[s * COORD_MAX_CKPT_COPIES + (size_t)j] < c)
                c = copied[s * COORD_MAX_CKPT_COPIES + (size_t)j];
    return c > floor ? c : floor;
}

json_t *coord_ckpt_copies_payload(const json_t *plan, const char *const *endpoints,
                                  const char *const *hosts, const bool *used, size_t n, int k,
                                  int *count)
{
    json_t *stages = json_object_get(plan, "stages");
    size_t ns = json_array_size(stages);
    json_t *out = json_array();
    int *owner = calloc(ns ? ns : 1, sizeof *owner);
    int *holders = calloc((ns ? ns : 1) * COORD_MAX_CKPT_COPIES, sizeof *holders);
    bool *serves = calloc(n ? n : 1, sizeof *serves);
    if (out == NULL || owner == NULL || holders == NULL || serves == NULL) {
        free(owner);
        free(holders);
        free(serves);
        json_decref(out);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        serves[i] = endpoints[i] != NULL && endpoints[i][0] != '\0';
    for (size_t s = 0; s < ns; s++) {
        json_t *devs = json_object_get(json_array_get(stages, s), "devices");
        json_int_t d = json_integer_value(json_array_get(devs, 0));
        owner[s] = json_is_integer(json_array_get(devs, 0)) && d >= 0 && (size_t)d < n && serves[d]
                       ? (int)d
                       : -1;
    }
    coord_ckpt_choose_holders(ns, owner, used, serves, hosts, n, k > 0 ? k : 0, holders, count);
    for (size_t s = 0; s < ns; s++) {
        if (count[s] == 0)
            continue;
        json_t *st = json_array_get(stages, s);
        json_t *hs = json_array();
        for (int j = 0; j < count[s]; j++)
            json_array_append_new(hs,
                                  json_string(endpoints[holders[s * COORD_MAX_CKPT_COPIES + j]]));
        json_array_append_new(out, json_pack("{s:I, s:O, s:O, s:s, s:o}", "stage", (json_int_t)s,
                                             "first_block", json_object_get(st, "first_block"),
                                             "last_block", json_object_get(st, "last_block"),
                                             "source", endpoints[owner[s]], "holders", hs));
    }
    free(owner);
    free(holders);
    free(serves);
    return out;
}
