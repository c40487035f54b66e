/*
 * plan_cluster: cluster JSON reader, synthetic cluster builder and the per-type cost tables.
 *
 * Device types are kept in a small array and referenced by index; servers list device
 * indices as a contiguous range, so the bandwidth between two devices is a table-free lookup.
 */
#include "coordinator/planner/plan_cluster.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_json.h"
#include "common/sc_util.h"

sc_status plan_cluster_new_empty(plan_cluster **out, sc_err *err)
{
    *out = calloc(1, sizeof **out);
    SC_ALLOC_CHECK(*out, err);
    return SC_OK;
}

void plan_cluster_destroy(plan_cluster **cp)
{
    if (cp == NULL || *cp == NULL)
        return;
    plan_cluster *c = *cp;
    for (int t = 0; t < c->n_types; t++)
        free(c->types[t].block_times);
    free(c->types);
    free(c->servers);
    free(c->devices);
    for (int l = 0; l < c->n_links; l++)
        free(c->links[l].devices);
    free(c->links);
    free(c->bw_matrix);
    free(c->zone_names);
    free(c->zone_bw);
    free(c->zone_price_per_gb);
    free(c);
    *cp = NULL;
}

sc_status plan_cluster_add_type(plan_cluster *c, const char *name, double relative_speed,
                                double memory_bytes, int *type_out, sc_err *err)
{
    if (!(relative_speed > 0) || !isfinite(relative_speed))
        return SC_ERRF(err, SC_ERR_INVALID, "device type %s: relative_speed must be > 0", name);
    plan_device_type *nt = realloc(c->types, (size_t)(c->n_types + 1) * sizeof *nt);
    SC_ALLOC_CHECK(nt, err);
    c->types = nt;
    plan_device_type *t = &c->types[c->n_types];
    memset(t, 0, sizeof *t);
    sc_strlcpy(t->name, name, sizeof t->name);
    t->relative_speed = relative_speed;
    t->memory_bytes = memory_bytes > 0 ? memory_bytes : HUGE_VAL;
    t->price_per_hour = -1;
    if (type_out)
        *type_out = c->n_types;
    c->n_types++;
    return SC_OK;
}

sc_status plan_cluster_add_server(plan_cluster *c, const char *name, double intra_bw, double nic_bw,
                                  const int *device_types, int n_devices, sc_err *err)
{
    if (!(intra_bw > 0) || !(nic_bw > 0))
        return SC_ERRF(err, SC_ERR_INVALID, "server %s: bandwidths must be > 0 bytes/s", name);
    if (n_devices < 1 || c->n_devices + n_devices > PLAN_MAX_DEVICES)
        return SC_ERRF(err, SC_ERR_INVALID, "server %s: needs 1 to %d devices in all", name,
                       PLAN_MAX_DEVICES);
    plan_server *ns = realloc(c->servers, (size_t)(c->n_servers + 1) * sizeof *ns);
    SC_ALLOC_CHECK(ns, err);
    c->servers = ns;
    plan_device *nd = realloc(c->devices, (size_t)(c->n_devices + n_devices) * sizeof *nd);
    SC_ALLOC_CHECK(nd, err);
    c->devices = nd;
    plan_server *s = &c->servers[c->n_servers];
    memset(s, 0, sizeof *s);
    sc_strlcpy(s->name, name, sizeof s->name);
    s->first_device = c->n_devices;
    s->n_devices = n_devices;
    s->intra_bw_bytes_per_s = intra_bw;
    s->nic_bw_bytes_per_s = nic_bw;
    for (int i = 0; i < n_devices; i++) {
        if (device_types[i] < 0 || device_types[i] >= c->n_types)
            return SC_ERRF(err, SC_ERR_INVALID, "server %s: unknown device type index %d", name,
                           device_types[i]);
        c->devices[c->n_devices + i].type = device_types[i];
        c->devices[c->n_devices + i].server = c->n_servers;
    }
    c->n_devices += n_devices;
    c->n_servers++;
    return SC_OK;
}

sc_status plan_cluster_new_uniform(plan_cluster **out, int n_gpus, double bw_bytes_per_s,
                                   double memory_bytes, sc_err *err)
{
    *out = NULL;
    if (n_gpus < 1 || n_gpus > PLAN_MAX_DEVICES)
        return SC_ERRF(err, SC_ERR_INVALID, "--gpus: expected 1 to %d, got %d", PLAN_MAX_DEVICES,
                       n_gpus);
    if (!(bw_bytes_per_s > 0) || !isfinite(bw_bytes_per_s))
        return SC_ERRF(err, SC_ERR_INVALID, "--bandwidth: expected bytes per second > 0, got %g",
                       bw_bytes_per_s);
    plan_cluster *c = NULL;
    sc_status rc;
    int *types = calloc((size_t)n_gpus, sizeof *types);
    SC_ALLOC_CHECK(types, err);
    SC_CHECK_GOTO(plan_cluster_new_empty(&c, err), fail);
    sc_strlcpy(c->source, "--gpus", sizeof c->source);
    SC_CHECK_GOTO(plan_cluster_add_type(c, "gpu", 1.0, memory_bytes, NULL, err), fail);
    SC_CHECK_GOTO(
        plan_cluster_add_server(c, "s0", bw_bytes_per_s, bw_bytes_per_s, types, n_gpus, err), fail);
    free(types);
    *out = c;
    return SC_OK;
fail:
    free(types);
    plan_cluster_destroy(&c);
    return rc;
}

/* ---------------------------------------------------------------- JSON */

/* The keys of a cluster file, at every level the planner reads: the format's own and those
 * stagecraft writes itself (`stagecraft topo --json`, the coordinator's cluster of a job). A key
 * outside these lists is refused with the closest valid one (a misspelt optional key must not
 * pass for an absent one). The hardware detail topo writes inside "device_info", "nics",
 * "numa_nodes_detail" and "cpu_workers" is descriptive: the planner reads none of it. */
static const char *const root_keys[] = {
    "format",           "version", "device_types",         "servers", "zones",
    "reference_device", "links",   "relative_speed_basis", NULL};
static const char *const type_keys[] = {"relative_speed",
                                        "memory_bytes",
                                        "block_times",
                                        "cpu_quota",
                                        "price_per_hour",
                                        "gflops",
                                        "gflops_source",
                                        "kind",
                                        "memory_source",
                                        "model",
                                        NULL};
static const char *const quota_keys[] = {"fraction", "period_s", NULL};
static const char *const block_time_keys[] = {"forward_s", "backward_s", NULL};
static const char *const server_keys[] = {"name",
                                          "devices",
                                          "zone",
                                          "intra_bandwidth_bytes_per_s",
                                          "nic_bandwidth_bytes_per_s",
                                          "nic_bandwidth_source",
                                          "compute_slots",
                                          "reduce_bandwidth_bytes_per_s",
                                          "cpu_cores",
                                          "cpu_workers",
                                          "device_info",
                                          "host_memory_bandwidth_bytes_per_s",
                                          "host_memory_bytes",
                                          "nics",
                                          "numa_nodes",
                                          "numa_nodes_detail",
                                          NULL};
static const char *const link_keys[] = {
    "kind", "name", "bandwidth_bytes_per_s", "server", "shared", "devices", NULL};
static const char *const zones_keys[] = {"bandwidth_bytes_per_s", "price_per_gb", "pairs", NULL};
static const char *const pair_keys[] = {"zones", "bandwidth_bytes_per_s", "price_per_gb", NULL};

static sc_status parse_type(plan_cluster *c, const sc_jnode *tn, int catalog, sc_err *err)
{
    double speed, mem;
    SC_CHECK(sc_jnode_expect_object(tn, err));
    SC_CHECK(sc_jnode_known_keys(tn, type_keys, err));
    SC_CHECK(sc_json_get_number(tn, "relative_speed", 1e-6, 1e6, &speed, err));
    SC_CHECK(sc_json_opt_number(tn, "memory_bytes", 1, 1e18, 0, &mem, err));
    SC_CHECK(plan_cluster_add_type(c, tn->key, speed, mem, NULL, err));
    plan_device_type *t = &c->types[c->n_types - 1];
    SC_CHECK(sc_json_opt_number(tn, "price_per_hour", 0, 1e9, -1, &t->price_per_hour, err));
    if (catalog && t->price_per_hour < 0)
        return sc_jnode_fail(tn, err, SC_ERR_INVALID,
                             "a catalogue's device type needs \"price_per_hour\" (the price of "
                             "one device for an hour, e.g. 2.5)");
    if (sc_jnode_has(tn, "cpu_quota")) {
        sc_jnode q;
        SC_CHECK(sc_json_get_object(tn, "cpu_quota", &q, err));
        SC_CHECK(sc_jnode_known_keys(&q, quota_keys, err));
        /* a fraction of 1 or more never throttles: the quota is left out of such a type */
        SC_CHECK(sc_json_get_number(&q, "fraction", 1e-4, 1, &t->quota_fraction, err));
        SC_CHECK(sc_json_get_number(&q, "period_s", 1e-4, 10, &t->quota_period_s, err));
        if (t->quota_fraction >= 1)
            t->quota_fraction = t->quota_period_s = 0;
    }
    if (!sc_jnode_has(tn, "block_times"))
        return SC_OK;
    sc_jnode bt;
    SC_CHECK(sc_json_get_object(tn, "block_times", &bt, err));
    size_t n = sc_jnode_size(&bt);
    if (n == 0)
        return SC_OK;
    t->block_times = calloc(n, sizeof *t->block_times);
    SC_ALLOC_CHECK(t->block_times, err);
    const char *key;
    json_t *val;
    json_object_foreach(bt.value, key, val)
    {
        sc_jnode e = {bt.doc, &bt, key, 0, val};
        plan_block_time *x = &t->block_times[t->n_block_times];
        SC_CHECK(sc_jnode_expect_object(&e, err));
        SC_CHECK(sc_jnode_known_keys(&e, block_time_keys, err));
        SC_CHECK(sc_json_get_number(&e, "forward_s", 0, 1e9, &x->forward_s, err));
        SC_CHECK(sc_json_get_number(&e, "backward_s", 0, 1e9, &x->backward_s, err));
        sc_strlcpy(x->block, key, sizeof x->block);
        t->n_block_times++;
    }
    return SC_OK;
}

static sc_status parse_links(plan_cluster *c, const sc_jnode *root, sc_err *err);
static sc_status parse_zones(plan_cluster *c, const sc_jnode *root, sc_err *err);

static sc_status parse_doc(plan_cluster *c, const sc_jdoc *doc, int catalog, sc_err *err)
{
    sc_jnode root = sc_jdoc_root(doc), types, servers;
    SC_CHECK(sc_jnode_expect_object(&root, err));
    SC_CHECK(sc_jdoc_check_format(doc, "stagecraft-cluster", 1, NULL, err));
    SC_CHECK(sc_jnode_known_keys(&root, root_keys, err));
    if (catalog) {
        if (sc_jnode_has(&root, "links")) {
            sc_jnode ln;
            SC_CHECK(sc_jnode_member(&root, "links", &ln, err));
            return sc_jnode_fail(&ln, err, SC_ERR_INVALID,
                                 "a catalogue cannot list links (it names devices that can be "
                                 "had, not how one machine is wired); leave \"links\" out");
        }
    }
    SC_CHECK(sc_json_get_object(&root, "device_types", &types, err));
    if (sc_jnode_size(&types) == 0)
        return sc_jnode_fail(&types, err, SC_ERR_INVALID,
                             "expected at least one device type, e.g. {\"A100\": "
                             "{\"relative_speed\": 1.0, \"memory_bytes\": 40e9}}");
    const char *key;
    json_t *val;
    json_object_foreach(types.value, key, val)
    {
        sc_jnode tn = {types.doc, &types, key, 0, val};
        SC_CHECK(parse_type(c, &tn, catalog, err));
    }
    SC_CHECK(sc_json_get_array(&root, "servers", 1, PLAN_MAX_DEVICES, &servers, err));
    for (size_t i = 0; i < sc_jnode_size(&servers); i++) {
        sc_jnode s = sc_jnode_element(&servers, i), devs;
        const char *name;
        char defname[32];
        double intra, nic;
        SC_CHECK(sc_jnode_expect_object(&s, err));
        SC_CHECK(sc_jnode_known_keys(&s, server_keys, err));
        snprintf(defname, sizeof defname, "s%zu", i);
        SC_CHECK(sc_json_opt_string(&s, "name", defname, &name, err));
        SC_CHECK(sc_json_get_array(&s, "devices", 1, PLAN_MAX_DEVICES, &devs, err));
        SC_CHECK(sc_json_get_number(&s, "intra_bandwidth_bytes_per_s", 1, 1e18, &intra, err));
        SC_CHECK(sc_json_get_number(&s, "nic_bandwidth_bytes_per_s", 1, 1e18, &nic, err));
        size_t nd = sc_jnode_size(&devs);
        if (c->n_devices + (int)nd > PLAN_MAX_DEVICES)
            return sc_jnode_fail(&devs, err, SC_ERR_INVALID, "more than %d devices in all",
                                 PLAN_MAX_DEVICES);
        int tix[PLAN_MAX_DEVICES];
        for (size_t d = 0; d < nd; d++) {
            sc_jnode dn = sc_jnode_element(&devs, d);
            const char *tname;
            SC_CHECK(sc_jnode_string(&dn, &tname, err));
            int found = -1;
            for (int t = 0; t < c->n_types; t++)
                if (strcmp(c->types[t].name, tname) == 0)
                    found = t;
            if (found < 0) {
                char names[512] = "";
                for (int t = 0; t < c->n_types; t++) {
                    if (t)
                        strncat(names, ", ", sizeof names - strlen(names) - 1);
                    strncat(names, c->types[t].name, sizeof names - strlen(names) - 1);
                }
                return sc_jnode_fail(&dn, err, SC_ERR_INVALID,
                                     "unknown device type \"%s\"; device_types defines: %s", tname,
                                     names);
            }
            tix[d] = found;
        }
        SC_CHECK(plan_cluster_add_server(c, name, intra, nic, tix, (int)nd, err));
        int64_t slots;
        double reduce;
        SC_CHECK(sc_json_opt_int(&s, "compute_slots", 1, 1 << 20, 0, &slots, err));
        SC_CHECK(sc_json_opt_number(&s, "reduce_bandwidth_bytes_per_s", 1, 1e18, 0, &reduce, err));
        c->servers[c->n_servers - 1].compute_slots = (int)slots;
        c->servers[c->n_servers - 1].reduce_bw_bytes_per_s = reduce;
        const char *zone;
        SC_CHECK(sc_json_opt_string(&s, "zone", "", &zone, err));
        SC_CHECK(plan_cluster_set_zone(c, c->n_servers - 1, zone, err));
    }
    SC_CHECK(parse_zones(c, &root, err));
    return parse_links(c, &root, err);
}

/* "zones": {"bandwidth_bytes_per_s", "price_per_gb", "pairs": [{"zones": [a, b], ...}]}: the
 * default between any two zones, then pairs that differ from it. */
static sc_status parse_zones(plan_cluster *c, const sc_jnode *root, sc_err *err)
{
    if (!sc_jnode_has(root, "zones"))
        return SC_OK;
    sc_jnode z, pairs;
    double bw, price;
    SC_CHECK(sc_json_get_object(root, "zones", &z, err));
    SC_CHECK(sc_jnode_known_keys(&z, zones_keys, err));
    SC_CHECK(sc_json_opt_number(&z, "bandwidth_bytes_per_s", 1, 1e18, HUGE_VAL, &bw, err));
    SC_CHECK(sc_json_opt_number(&z, "price_per_gb", 0, 1e6, 0, &price, err));
    plan_cluster_set_zone_link(c, -1, -1, bw, price);
    if (!sc_jnode_has(&z, "pairs"))
        return SC_OK;
    SC_CHECK(sc_json_get_array(&z, "pairs", 0, 1 << 16, &pairs, err));
    for (size_t i = 0; i < sc_jnode_size(&pairs); i++) {
        sc_jnode p = sc_jnode_element(&pairs, i), names;
        int zi[2];
        SC_CHECK(sc_jnode_expect_object(&p, err));
        SC_CHECK(sc_jnode_known_keys(&p, pair_keys, err));
        SC_CHECK(sc_json_get_array(&p, "zones", 2, 2, &names, err));
        for (int k = 0; k < 2; k++) {
            sc_jnode nn = sc_jnode_element(&names, (size_t)k);
            const char *name;
            SC_CHECK(sc_jnode_string(&nn, &name, err));
            zi[k] = -1;
            for (int q = 0; q < c->n_zones; q++)
                if (strcmp(c->zone_names[q], name) == 0)
                    zi[k] = q;
            if (zi[k] < 0 || name[0] == '\0') {
                char known[512] = "";
                for (int q = 0; q < c->n_zones; q++) {
                    if (c->zone_names[q][0] == '\0')
                        continue;
                    if (known[0])
                        strncat(known, ", ", sizeof known - strlen(known) - 1);
                    strncat(known, c->zone_names[q], sizeof known - strlen(known) - 1);
                }
                return sc_jnode_fail(&nn, err, SC_ERR_INVALID,
                                     "no server is in zone \"%s\"; the servers' zones are: %s",
                                     name, known[0] ? known : "(none)");
            }
        }
        if (zi[0] == zi[1])
            return sc_jnode_fail(&names, err, SC_ERR_INVALID,
                                 "a pair names two distinct zones (within a zone, the servers' "
                                 "own bandwidths apply)");
        double pbw, pprice;
        SC_CHECK(sc_json_opt_number(&p, "bandwidth_bytes_per_s", 1, 1e18, bw, &pbw, err));
        SC_CHECK(sc_json_opt_number(&p, "price_per_gb", 0, 1e6, price, &pprice, err));
        plan_cluster_set_zone_link(c, zi[0], zi[1], pbw, pprice);
    }
    return SC_OK;
}

sc_status plan_cluster_set_zone(plan_cluster *c, int server, const char *name, sc_err *err)
{
    assert(server >= 0 && server < c->n_servers);
    int z = 0;
    while (z < c->n_zones && strcmp(c->zone_names[z], name) != 0)
        z++;
    if (z == c->n_zones) {
        size_t n = (size_t)z + 1;
        char(*names)[PLAN_NAME_MAX] = realloc(c->zone_names, n * sizeof *names);
        SC_ALLOC_CHECK(names, err);
        c->zone_names = names;
        double *bw = malloc(n * n * sizeof *bw), *price = malloc(n * n * sizeof *price);
        if (bw == NULL || price == NULL) {
            free(bw);
            free(price);
            return SC_ERRF(err, SC_ERR_NOMEM, "out of memory for %zu zones", n);
        }
        for (size_t a = 0; a < n; a++)
            for (size_t b = 0; b < n; b++) {
                int old = a < n - 1 && b < n - 1;
                bw[a * n + b] = old ? c->zone_bw[a * (n - 1) + b] : HUGE_VAL;
                price[a * n + b] = old ? c->zone_price_per_gb[a * (n - 1) + b] : 0;
            }
        free(c->zone_bw);
        free(c->zone_price_per_gb);
        c->zone_bw = bw;
        c->zone_price_per_gb = price;
        sc_strlcpy(c->zone_names[z], name, PLAN_NAME_MAX);
        c->n_zones++;
    }
    c->servers[server].zone = z;
    return SC_OK;
}

void plan_cluster_set_zone_link(plan_cluster *c, int za, int zb, double bw_bytes_per_s,
                                double price_per_gb)
{
    size_t n = (size_t)c->n_zones;
    for (size_t a = 0; a < n; a++)
        for (size_t b = 0; b < n; b++) {
            int hit =
                za < 0 ? a != b : ((int)a == za && (int)b == zb) || ((int)a == zb && (int)b == za);
            if (!hit)
                continue;
            c->zone_bw[a * n + b] = bw_bytes_per_s;
            c->zone_price_per_gb[a * n + b] = price_per_gb;
        }
}

double plan_cluster_price_per_byte(const plan_cluster *c, int a, int b)
{
    int za = c->servers[c->devices[a].server].zone, zb = c->servers[c->devices[b].server].zone;
    if (za == zb || c->zone_price_per_gb == NULL)
        return 0;
    return c->zone_price_per_gb[(size_t)za * (size_t)c->n_zones + (size_t)zb] / 1e9;
}

int plan_cluster_has_prices(const plan_cluster *c)
{
    for (int t = 0; t < c->n_types; t++)
        if (c->types[t].price_per_hour < 0)
            return 0;
    return c->n_types > 0;
}

double plan_cluster_devices_price_per_hour(const plan_cluster *c)
{
    double sum = 0;
    for (int d = 0; d < c->n_devices; d++) {
        double p = c->types[c->devices[d].type].price_per_hour;
        sum += p > 0 ? p : 0;
    }
    return sum;
}

static sc_status parse_text(plan_cluster **out, const char *source, const char *text, size_t len,
                            int catalog, sc_err *err)
{
    sc_jdoc *doc = NULL;
    plan_cluster *c = NULL;
    sc_status rc;
    *out = NULL;
    SC_CHECK(sc_jdoc_parse(&doc, source, text, len, err));
    SC_CHECK_GOTO(plan_cluster_new_empty(&c, err), fail);
    sc_strlcpy(c->source, source, sizeof c->source);
    SC_CHECK_GOTO(parse_doc(c, doc, catalog, err), fail);
    sc_jdoc_destroy(&doc);
    *out = c;
    return SC_OK;
fail:
    sc_jdoc_destroy(&doc);
    plan_cluster_destroy(&c);
    return rc;
}

sc_status plan_cluster_parse(plan_cluster **out, const char *source, const char *text, size_t len,
                             sc_err *err)
{
    return parse_text(out, source, text, len, 0, err);
}

sc_status plan_cluster_parse_catalog(plan_cluster **out, const char *source, const char *text,
                                     size_t len, sc_err *err)
{
    return parse_text(out, source, text, len, 1, err);
}

static sc_status load_file(plan_cluster **out, const char *path, int catalog, sc_err *err)
{
    char *text = NULL;
    size_t len = 0;
    *out = NULL;
    SC_CHECK(sc_file_read(path, PLAN_CLUSTER_MAX_BYTES, &text, &len, err));
    sc_status rc = parse_text(out, path, text, len, catalog, err);
    free(text);
    return rc;
}

sc_status plan_cluster_load(plan_cluster **out, const char *path, sc_err *err)
{
    return load_file(out, path, 0, err);
}

sc_status plan_cluster_load_catalog(plan_cluster **out, const char *path, sc_err *err)
{
    return load_file(out, path, 1, err);
}

static int link_has(const plan_link *l, int d)
{
    for (int i = 0; i < l->n_devices; i++)
        if (l->devices[i] == d)
            return 1;
    return 0;
}

int plan_cluster_route(const plan_cluster *c, int a, int b, int *links, int max)
{
    int n = 0;
    for (int l = 0; l < c->n_links; l++) {
        const plan_link *k = &c->links[l];
        if (k->kind == PLAN_LINK_NVLINK && link_has(k, a) && link_has(k, b)) {
            if (max > 0)
                links[0] = l;
            return 1;
        }
    }
    int same = c->devices[a].server == c->devices[b].server;
    int nic_a = 0, nic_b = 0;
    for (int l = 0; l < c->n_links && n < max; l++) {
        const plan_link *k = &c->links[l];
        int ha = link_has(k, a), hb = link_has(k, b);
        switch (k->kind) {
        case PLAN_LINK_PCIE_UPLINK:
        case PLAN_LINK_SOCKET:
            /* crossed when it holds one side only; a switch-local copy stays below it */
            if (ha != hb || (!same && (ha || hb)))
                links[n++] = l;
            break;
        case PLAN_LINK_NIC:
            if (!same && ha && !nic_a) {
                links[n++] = l;
                nic_a = 1;
            } else if (!same && hb && !nic_b) {
                links[n++] = l;
                nic_b = 1;
            }
            break;
        default:
            break;
        }
    }
    return n;
}

/* The bandwidth model without the matrix (used to fill it). */
static double pair_bw(const plan_cluster *c, int a, int b)
{
    const plan_server *sa = &c->servers[c->devices[a].server];
    const plan_server *sb = &c->servers[c->devices[b].server];
    double bw = sa == sb
                    ? sa->intra_bw_bytes_per_s
                    : (sa->nic_bw_bytes_per_s < sb->nic_bw_bytes_per_s ? sa->nic_bw_bytes_per_s
                                                                       : sb->nic_bw_bytes_per_s);
    if (sa != sb && sa->zone != sb->zone && c->zone_bw != NULL) {
        double zbw = c->zone_bw[(size_t)sa->zone * (size_t)c->n_zones + (size_t)sb->zone];
        if (zbw < bw)
            bw = zbw;
    }
    if (c->n_links == 0)
        return bw;
    int route[64];
    int n = plan_cluster_route(c, a, b, route, 64);
    if (n == 1 && c->links[route[0]].kind == PLAN_LINK_NVLINK)
        return c->links[route[0]].bw_bytes_per_s;
    for (int i = 0; i < n; i++)
        if (c->links[route[i]].bw_bytes_per_s < bw)
            bw = c->links[route[i]].bw_bytes_per_s;
    return bw;
}

double plan_cluster_bw(const plan_cluster *c, int a, int b)
{
    if (c->bw_matrix != NULL)
        return c->bw_matrix[(size_t)a * (size_t)c->n_devices + (size_t)b];
    return pair_bw(c, a, b);
}

static const char *const link_kinds[] = {"nvlink", "pcie_uplink", "socket", "nic", NULL};

static sc_status parse_links(plan_cluster *c, const sc_jnode *root, sc_err *err)
{
    if (!sc_jnode_has(root, "links"))
        return SC_OK;
    sc_jnode arr;
    SC_CHECK(sc_json_get_array(root, "links", 0, 1 << 16, &arr, err));
    size_t n = sc_jnode_size(&arr);
    if (n == 0)
        return SC_OK;
    c->links = calloc(n, sizeof *c->links);
    SC_ALLOC_CHECK(c->links, err);
    for (size_t i = 0; i < n; i++) {
        sc_jnode e = sc_jnode_element(&arr, i), devs;
        plan_link *l = &c->links[i];
        const char *kind, *name;
        SC_CHECK(sc_jnode_expect_object(&e, err));
        SC_CHECK(sc_jnode_known_keys(&e, link_keys, err));
        SC_CHECK(sc_json_opt_string(&e, "kind", "other", &kind, err));
        l->kind = PLAN_LINK_OTHER;
        for (int k = 0; link_kinds[k]; k++)
            if (strcmp(kind, link_kinds[k]) == 0)
                l->kind = (plan_link_kind)k;
        /* a misspelt kind would make the link count for nothing, silently */
        if (l->kind == PLAN_LINK_OTHER && sc_jnode_has(&e, "kind")) {
            sc_jnode kn;
            SC_CHECK(sc_jnode_member(&e, "kind", &kn, err));
            return sc_jnode_fail(&kn, err, SC_ERR_INVALID,
                                 "unknown link kind \"%s\"; expected nvlink, pcie_uplink, socket "
                                 "or nic",
                                 kind);
        }
        SC_CHECK(sc_json_opt_string(&e, "name", "", &name, err));
        sc_strlcpy(l->name, name, sizeof l->name);
        SC_CHECK(sc_json_get_number(&e, "bandwidth_bytes_per_s", 1, 1e18, &l->bw_bytes_per_s, err));
        SC_CHECK(sc_json_get_array(&e, "devices", 1, PLAN_MAX_DEVICES, &devs, err));
        c->n_links++;
        l->devices = calloc(sc_jnode_size(&devs), sizeof(int));
        SC_ALLOC_CHECK(l->devices, err);
        for (size_t d = 0; d < sc_jnode_size(&devs); d++) {
            sc_jnode dn = sc_jnode_element(&devs, d);
            int64_t id;
            SC_CHECK(sc_jnode_int(&dn, 0, c->n_devices - 1, &id, err));
            l->devices[l->n_devices++] = (int)id;
        }
    }
    /* pair bandwidths are looked up in the DPs' inner loops: tabulate them once */
    if (c->n_devices <= 1024) {
        size_t D = (size_t)c->n_devices;
        c->bw_matrix = malloc(D * D * sizeof(double));
        SC_ALLOC_CHECK(c->bw_matrix, err);
        for (size_t a = 0; a < D; a++)
            for (size_t b = 0; b < D; b++)
                c->bw_matrix[a * D + b] = a == b ? HUGE_VAL : pair_bw(c, (int)a, (int)b);
    }
    return SC_OK;
}

double plan_cluster_max_speed(const plan_cluster *c)
{
    double best = 0;
    for (int d = 0; d < c->n_devices; d++)
        if (c->types[c->devices[d].type].relative_speed > best)
            best = c->types[c->devices[d].type].relative_speed;
    return best;
}

/* ---------------------------------------------------------------- cost */

void plan_cost_destroy(plan_cost **cp)
{
    if (cp == NULL || *cp == NULL)
        return;
    plan_cost *c = *cp;
    free(c->fwd_s);
    free(c->bwd_s);
    free(c->work_prefix_s);
    free(c->act_bytes);
    free(c->stash_prefix);
    free(c->wstash_prefix);
    free(c->scratch);
    free(c->param_prefix);
    free(c);
    *cp = NULL;
}

sc_status plan_cost_new(plan_cost **out, const plan_profile *p, const plan_cluster *cl,
                        double samples, int batch, sc_err *err)
{
    *out = NULL;
    size_t L = (size_t)p->n_blocks, T = (size_t)cl->n_types;
    plan_cost *c = calloc(1, sizeof *c);
    SC_ALLOC_CHECK(c, err);
    c->profile = p;
    c->cluster = cl;
    c->n_blocks = p->n_blocks;
    c->n_types = cl->n_types;
    c->samples = samples;
    c->batch = batch;
    c->fwd_s = calloc(T * L, sizeof(double));
    c->bwd_s = calloc(T * L, sizeof(double));
    c->work_prefix_s = calloc(T * (L + 1), sizeof(double));
    c->act_bytes = calloc(L, sizeof(double));
    c->stash_prefix = calloc(L + 1, sizeof(double));
    c->wstash_prefix = calloc(L + 1, sizeof(double));
    c->scratch = calloc(L + 1, sizeof(double));
    c->param_prefix = calloc(L + 1, sizeof(double));
    if (!c->fwd_s || !c->bwd_s || !c->work_prefix_s || !c->act_bytes || !c->stash_prefix ||
        !c->wstash_prefix || !c->scratch || !c->param_prefix) {
        plan_cost_destroy(&c);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory for the cost tables (%zu blocks)", L);
    }
    double k = plan_profile_size_factor(p, samples, batch);
    for (size_t l = 0; l < L; l++) {
        c->act_bytes[l] = p->blocks[l].activation_bytes * k;
        c->stash_prefix[l + 1] = c->stash_prefix[l] + p->blocks[l].stash_bytes * k;
        c->wstash_prefix[l + 1] = c->wstash_prefix[l] + p->blocks[l].wstash_bytes * k;
        c->scratch[l] = p->blocks[l].scratch_bytes * k;
        c->param_prefix[l + 1] = c->param_prefix[l] + p->blocks[l].parameter_bytes;
    }
    for (size_t t = 0; t < T; t++) {
        const plan_device_type *ty = &cl->types[t];
        /* a type named like the profile's reference device ran the profile: speed 1 */
        double speed = strcmp(ty->name, p->reference_device) == 0 ? 1.0 : ty->relative_speed;
        for (size_t l = 0; l < L; l++) {
            double f, b;
            plan_profile_block_time(p, (int)l, samples, batch, &f, &b);
            c->fwd_s[t * L + l] = f / speed;
            c->bwd_s[t * L + l] = b / speed;
        }
        for (int i = 0; i < ty->n_block_times; i++) {
            size_t l = 0;
            while (l < L && strcmp(p->blocks[l].name, ty->block_times[i].block) != 0)
                l++;
            if (l == L) {
                sc_status rc = SC_ERRF(err, SC_ERR_INVALID,
                                       "%s: $.device_types.%s.block_times: block \"%s\" is not "
                                       "in the profile (%d blocks, first \"%s\")",
                                       cl->source, ty->name, ty->block_times[i].block, p->n_blocks,
                                       p->blocks[0].name);
                plan_cost_destroy(&c);
                return rc;
            }
            c->fwd_s[t * L + l] = ty->block_times[i].forward_s * k;
            c->bwd_s[t * L + l] = ty->block_times[i].backward_s * k;
        }
        double *w = c->work_prefix_s + t * (L + 1);
        for (size_t l = 0; l < L; l++)
            w[l + 1] = w[l] + c->fwd_s[t * L + l] + c->bwd_s[t * L + l];
    }
    *out = c;
    return SC_OK;
}

double plan_cost_cut_one_way(const plan_cost *c, int last, int a, int b)
{
    if (a == b)
        return 0;
    return c->act_bytes[last] / plan_cluster_bw(c->cluster, a, b);
}
