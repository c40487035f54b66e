/*
 * topo_xml: a one-pass scanner over untrusted hwloc XML. See topo_xml.h. It keeps a stack of
 * open elements (bounded by TOPO_XML_MAX_DEPTH) and the list of object ids; nothing else.
 */
#include "topology/topo_xml.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"

static int cmp_u64(const void *a, const void *b)
{
    unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
    return x < y ? -1 : x > y;
}

/* Finds `needle` in text[from, len); returns its offset or len. */
static size_t find_str(const char *text, size_t len, size_t from, const char *needle)
{
    size_t nl = strlen(needle);
    for (size_t i = from; i + nl <= len; i++)
        if (text[i] == needle[0] && memcmp(text + i, needle, nl) == 0)
            return i;
    return len;
}

static int line_of(const char *text, size_t pos)
{
    int line = 1;
    for (size_t i = 0; i < pos; i++)
        line += text[i] == '\n';
    return line;
}

/* The attributes of one start tag, parsed strictly: hwloc's own XML reader stops at the first
 * attribute it cannot parse and then runs with what it got, so anything it could misread is
 * refused here. */
#define XML_MAX_ATTRS 64
typedef struct {
    const char *name, *val;
    size_t name_len, val_len;
} xml_attr;
typedef struct {
    xml_attr a[XML_MAX_ATTRS];
    size_t n;
} xml_tag;

/* Parses name="value" pairs in text[from, to); 0 on bad syntax, too many or duplicates.
 * Separators are spaces only, as hwloc writes them: hwloc's own reader mishandles other white
 * space inside a tag (it fails the load, leaking what it had built). */
static int tag_parse(const char *text, size_t from, size_t to, xml_tag *t)
{
    t->n = 0;
    size_t i = from;
    for (;;) {
        size_t ws = i;
        while (i < to && text[i] == ' ')
            i++;
        if (i == to)
            return 1;
        if (i == ws || t->n == XML_MAX_ATTRS)
            return 0; /* attributes must be separated by white space */
        size_t n0 = i;
        while (i < to && (isalnum((unsigned char)text[i]) || text[i] == '_' || text[i] == '-' ||
                          text[i] == ':' || text[i] == '.'))
            i++;
        if (i == n0 || i + 1 >= to || text[i] != '=' || text[i + 1] != '"')
            return 0;
        xml_attr *at = &t->a[t->n];
        at->name = text + n0;
        at->name_len = i - n0;
        size_t v = i + 2, e = v;
        while (e < to && text[e] != '"' && text[e] != '<')
            e++;
        if (e == to || text[e] != '"')
            return 0;
        at->val = text + v;
        at->val_len = e - v;
        for (size_t k = 0; k < t->n; k++)
            if (t->a[k].name_len == at->name_len &&
                memcmp(t->a[k].name, at->name, at->name_len) == 0)
                return 0;
        t->n++;
        i = e + 1;
    }
}

static const xml_attr *tag_find(const xml_tag *t, const char *name)
{
    size_t nl = strlen(name);
    for (size_t k = 0; k < t->n; k++)
        if (t->a[k].name_len == nl && memcmp(t->a[k].name, name, nl) == 0)
            return &t->a[k];
    return NULL;
}

/* Copies attribute `name` into out (truncated to size); 0 when absent. */
static int tag_get(const xml_tag *t, const char *name, char *out, size_t size)
{
    const xml_attr *at = tag_find(t, name);
    if (at == NULL)
        return 0;
    size_t n = at->val_len < size - 1 ? at->val_len : size - 1;
    memcpy(out, at->val, n);
    out[n] = '\0';
    return 1;
}

/* The elements hwloc 1.x and 2.x write (hwloc 2.9's reader refuses any other). */
static int element_known(const char *name, size_t len)
{
    static const char *const known[] = {
        "object",  "info",       "page_type",        "userdata", "distances",
        "latency", "distances2", "distances2hetero", "indexes",  "u64values",
        "cpukind", "memattr",    "memattr_value",    "support"};
    for (size_t k = 0; k < SC_ARRAY_LEN(known); k++)
        if (strlen(known[k]) == len && memcmp(known[k], name, len) == 0)
            return 1;
    return 0;
}

static int element_takes_text(const char *name, size_t len)
{
    return (len == 7 && memcmp(name, "indexes", 7) == 0) ||
           (len == 9 && memcmp(name, "u64values", 9) == 0) ||
           (len == 8 && memcmp(name, "userdata", 8) == 0);
}

/* hwloc's importer trusts an object's cpu and node sets to be present and well formed (a
 * missing complete_nodeset crashes it), so every CPU-side object must carry all four, and
 * every set must read as an hwloc bitmap ("0x0000ffff,0xffffffff"). */
enum { XML_OTHER = 0, XML_CPU_OBJECT, XML_IO_OBJECT, XML_MISC_OBJECT };

static sc_status check_object_tag(const xml_tag *t, const char *source, int line, int *kind,
                                  char *type, size_t type_size, sc_err *err)
{
    static const char *const io_types[] = {"Bridge", "PCIDev", "OSDev", "Misc"};
    static const char *const sets[] = {"cpuset",           "complete_cpuset", "nodeset",
                                       "complete_nodeset", "allowed_cpuset",  "allowed_nodeset",
                                       "online_cpuset"};
    if (!tag_get(t, "type", type, type_size))
        return SC_ERRF(err, SC_ERR_PARSE, "%s:%d: <object> without a type attribute", source, line);
    int io = 0;
    for (size_t k = 0; k < SC_ARRAY_LEN(io_types); k++)
        io |= strcmp(type, io_types[k]) == 0;
    *kind = !io ? XML_CPU_OBJECT : strcmp(type, "Misc") == 0 ? XML_MISC_OBJECT : XML_IO_OBJECT;
    for (size_t k = 0; k < SC_ARRAY_LEN(sets); k++) {
        const xml_attr *at = tag_find(t, sets[k]);
        if (at == NULL) {
            if (!io && k < 4)
                return SC_ERRF(err, SC_ERR_PARSE, "%s:%d: %s object without %s", source, line, type,
                               sets[k]);
            continue;
        }
        size_t ok = 0;
        while (ok < at->val_len && strchr("0123456789abcdefABCDEFx,", at->val[ok]) != NULL)
            ok++;
        if (at->val_len < 3 || at->val[0] != '0' || at->val[1] != 'x' || ok < at->val_len)
            return SC_ERRF(err, SC_ERR_PARSE,
                           "%s:%d: %s of a %s object is not an hwloc bitmap (e.g. "
                           "\"0x000000ff\")",
                           source, line, sets[k], type);
    }
    /* hwloc reads the PCIe link speed (GB/s) with atof and keeps whatever it gets; a wild one
     * would become a server's bandwidth that the planner then refuses. */
    const xml_attr *ls = tag_find(t, "pci_link_speed");
    if (ls != NULL) {
        char v[64], *end;
        size_t n = ls->val_len < sizeof v - 1 ? ls->val_len : sizeof v - 1;
        memcpy(v, ls->val, n);
        v[n] = '\0';
        double gbs = strtod(v, &end);
        if (n == 0 || n < ls->val_len || *end != '\0' || !isfinite(gbs) || gbs < 0 ||
            gbs > TOPO_XML_MAX_LINK_GBS)
            return SC_ERRF(err, SC_ERR_PARSE,
                           "%s:%d: pci_link_speed of a %s object: expected GB/s in [0, %g], got "
                           "\"%.*s\"",
                           source, line, type, TOPO_XML_MAX_LINK_GBS,
                           (int)(ls->val_len < 32 ? ls->val_len : 32), ls->val);
    }
    /* hwloc reads local_memory with strtoull: "-5" becomes 2^64 - 5, and the sum over nodes
     * wraps into the server's memory */
    const xml_attr *lm = tag_find(t, "local_memory");
    if (lm != NULL) {
        unsigned long long bytes = 0;
        bool ok = lm->val_len > 0 && lm->val_len <= 20;
        for (size_t i = 0; ok && i < lm->val_len; i++) {
            ok = lm->val[i] >= '0' && lm->val[i] <= '9';
            bytes = ok && bytes <= TOPO_XML_MAX_NODE_BYTES
                        ? bytes * 10 + (unsigned)(lm->val[i] - '0')
                        : bytes;
        }
        if (!ok || bytes > TOPO_XML_MAX_NODE_BYTES)
            return SC_ERRF(err, SC_ERR_PARSE,
                           "%s:%d: local_memory of a %s object: expected bytes in [0, %llu], got "
                           "\"%.*s\"",
                           source, line, type, TOPO_XML_MAX_NODE_BYTES,
                           (int)(lm->val_len < 32 ? lm->val_len : 32), lm->val);
    }
    return SC_OK;
}

size_t topo_xml_bom(const char *text, size_t len)
{
    return len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
}

sc_status topo_xml_check(const char *text, size_t len, size_t max_bytes, const char *source,
                         sc_err *err)
{
    if (max_bytes == 0)
        max_bytes = TOPO_XML_MAX_BYTES;
    if (len > max_bytes)
        return SC_ERRF(err, SC_ERR_TOO_LARGE,
                       "%s: hwloc XML of %zu bytes is larger than the %zu accepted", source, len,
                       max_bytes);
    size_t first = topo_xml_bom(text, len);
    while (first < len && isspace((unsigned char)text[first]))
        first++;
    if (first == len)
        return SC_ERRF(err, SC_ERR_PARSE, "%s: empty, expected an hwloc XML export", source);
    if (text[first] != '<')
        return SC_ERRF(err, SC_ERR_PARSE,
                       "%s: not XML (expected an hwloc XML export, e.g. from "
                       "`lstopo --of xml`)",
                       source);

    size_t cap = 256, n_ids = 0;
    unsigned long long *ids = malloc(cap * sizeof(*ids));
    SC_ALLOC_CHECK(ids, err);
    sc_status rc = SC_OK;
    int depth = 0, seen_root = 0, io_depth = 0, top_objects = 0;
    unsigned char kinds[TOPO_XML_MAX_DEPTH + 1];   /* kind of each open element */
    unsigned char text_ok[TOPO_XML_MAX_DEPTH + 1]; /* ... whether it may hold text */
    size_t open_at[TOPO_XML_MAX_DEPTH + 1], open_len[TOPO_XML_MAX_DEPTH + 1]; /* its name */
    size_t n_objects = 0;
    unsigned long long max_nbobjs = 0; /* largest distance matrix declared */
    size_t i = first;
    while (i < len) {
        if (text[i] != '<') {
            /* hwloc's reader takes text only inside a few elements; elsewhere it fails, and
             * its failure paths leak, so stray text stops here. */
            if (!isspace((unsigned char)text[i]) && (depth == 0 || !text_ok[depth - 1])) {
                rc = SC_ERRF(err, SC_ERR_PARSE, "%s:%d: text outside of any value element", source,
                             line_of(text, i));
                goto out;
            }
            i++;
            continue;
        }
        if (len - i >= 4 && memcmp(text + i, "<!--", 4) == 0) {
            size_t e = find_str(text, len, i + 4, "-->");
            if (e == len)
                goto truncated;
            i = e + 3;
            continue;
        }
        if (len - i >= 9 && memcmp(text + i, "<![CDATA[", 9) == 0) {
            size_t e = find_str(text, len, i + 9, "]]>");
            if (e == len)
                goto truncated;
            i = e + 3;
            continue;
        }
        if (len - i >= 2 && (text[i + 1] == '?' || text[i + 1] == '!')) {
            size_t e = i + 2;
            while (e < len && text[e] != '>') {
                /* An internal DTD subset can declare entities that expand without bound. */
                if (text[e] == '[') {
                    rc = SC_ERRF(err, SC_ERR_PARSE,
                                 "%s:%d: DTD declarations and entities are not accepted in "
                                 "hwloc XML",
                                 source, line_of(text, e));
                    goto out;
                }
                e++;
            }
            if (e == len)
                goto truncated;
            i = e + 1;
            continue;
        }
        /* A start or end tag: find its closing '>' outside quoted attribute values. */
        size_t e = i + 1;
        char quote = 0;
        while (e < len && (quote || text[e] != '>')) {
            if (quote && text[e] == quote)
                quote = 0;
            else if (!quote && (text[e] == '"' || text[e] == '\''))
                quote = text[e];
            e++;
        }
        if (e == len)
            goto truncated;
        if (text[i + 1] == '/') {
            if (--depth < 0) {
                rc = SC_ERRF(err, SC_ERR_PARSE, "%s:%d: closing tag without an opening one", source,
                             line_of(text, i));
                goto out;
            }
            io_depth -= kinds[depth] == XML_IO_OBJECT;
            size_t cn = i + 2, cl = 0;
            while (cn + cl < e && !isspace((unsigned char)text[cn + cl]))
                cl++;
            if (cl != open_len[depth] || memcmp(text + cn, text + open_at[depth], cl) != 0) {
                rc = SC_ERRF(err, SC_ERR_PARSE, "%s:%d: </%.*s> closes <%.*s>", source,
                             line_of(text, i), (int)(cl < 40 ? cl : 40), text + cn,
                             (int)(open_len[depth] < 40 ? open_len[depth] : 40),
                             text + open_at[depth]);
                goto out;
            }
            i = e + 1;
            continue;
        }
        int self_closing = text[e - 1] == '/';
        size_t name_end = i + 1;
        while (name_end < e && !isspace((unsigned char)text[name_end]) && text[name_end] != '/')
            name_end++;
        size_t name_len = name_end - (i + 1);
        xml_tag tag;
        if (name_len == 0 || !tag_parse(text, name_end, self_closing ? e - 1 : e, &tag)) {
            rc = SC_ERRF(err, SC_ERR_PARSE,
                         "%s:%d: malformed start tag (attributes must read name=\"value\", "
                         "each once, separated by spaces)",
                         source, line_of(text, i));
            goto out;
        }
        if (seen_root && !element_known(text + i + 1, name_len)) {
            rc = SC_ERRF(err, SC_ERR_PARSE, "%s:%d: <%.*s> is not an hwloc XML element", source,
                         line_of(text, i), (int)(name_len < 40 ? name_len : 40), text + i + 1);
            goto out;
        }
        if (!seen_root) {
            seen_root = 1;
            if (name_len != 8 || memcmp(text + i + 1, "topology", 8) != 0) {
                rc = SC_ERRF(err, SC_ERR_PARSE,
                             "%s:%d: root element is <%.*s>, expected <topology> (an hwloc XML "
                             "export)",
                             source, line_of(text, i), (int)(name_len < 40 ? name_len : 40),
                             text + i + 1);
                goto out;
            }
            char version[32];
            if (tag_get(&tag, "version", version, sizeof(version)) && atoi(version) >= 3) {
                rc = SC_ERRF(err, SC_ERR_VERSION,
                             "%s: hwloc XML version %s (written by hwloc 3.x) is not supported: "
                             "this build reads hwloc 1.x and 2.x exports; export the machine "
                             "with hwloc 2.x (`lstopo --of xml`)",
                             source, version);
                goto out;
            }
        } else if (depth == 0) {
            rc = SC_ERRF(err, SC_ERR_PARSE, "%s:%d: content after the <topology> element", source,
                         line_of(text, i));
            goto out;
        }
        if (name_len >= 9 && memcmp(text + i + 1, "distances", 9) == 0) {
            char nb[32];
            if (tag_get(&tag, "nbobjs", nb, sizeof(nb))) {
                unsigned long long v = strtoull(nb, NULL, 10);
                if (v > max_nbobjs)
                    max_nbobjs = v;
            }
        }
        /* hwloc's reader fails (and leaks) on an info without both attributes */
        if (name_len == 4 && memcmp(text + i + 1, "info", 4) == 0 &&
            (tag_find(&tag, "name") == NULL || tag_find(&tag, "value") == NULL)) {
            rc = SC_ERRF(err, SC_ERR_PARSE, "%s:%d: <info> needs both a name and a value attribute",
                         source, line_of(text, i));
            goto out;
        }
        int kind = XML_OTHER;
        if (name_len == 6 && memcmp(text + i + 1, "object", 6) == 0) {
            n_objects++;
            char type[32];
            if (check_object_tag(&tag, source, line_of(text, i), &kind, type, sizeof(type), err) !=
                SC_OK) {
                rc = err != NULL ? err->code : SC_ERR_PARSE;
                goto out;
            }
            /* hwloc's importer also assumes the tree's shape: one root machine, and CPU-side
             * objects never below a PCI or OS device. */
            if (depth == 1 && (++top_objects > 1 ||
                               (strcmp(type, "Machine") != 0 && strcmp(type, "System") != 0))) {
                rc = SC_ERRF(err, SC_ERR_PARSE,
                             "%s:%d: the topology must hold exactly one Machine object at its "
                             "top, found a %s object",
                             source, line_of(text, i), type);
                goto out;
            }
            if (kind == XML_CPU_OBJECT && io_depth > 0) {
                rc = SC_ERRF(err, SC_ERR_PARSE, "%s:%d: a %s object inside an I/O object", source,
                             line_of(text, i), type);
                goto out;
            }
            char id[32];
            if (tag_get(&tag, "gp_index", id, sizeof(id))) {
                if (n_ids == cap) {
                    unsigned long long *more = realloc(ids, 2 * cap * sizeof(*ids));
                    if (more == NULL) {
                        rc = SC_ERRF(err, SC_ERR_NOMEM, "%s: out of memory", source);
                        goto out;
                    }
                    ids = more;
                    cap *= 2;
                }
                ids[n_ids++] = strtoull(id, NULL, 10);
            }
        }
        if (!self_closing) {
            if (depth >= TOPO_XML_MAX_DEPTH) {
                rc = SC_ERRF(err, SC_ERR_PARSE,
                             "%s:%d: elements nested deeper than %d levels (not an hwloc export)",
                             source, line_of(text, i), TOPO_XML_MAX_DEPTH);
                goto out;
            }
            open_at[depth] = i + 1;
            open_len[depth] = name_len;
            text_ok[depth] = element_takes_text(text + i + 1, name_len);
            kinds[depth++] = (unsigned char)kind;
            io_depth += kind == XML_IO_OBJECT;
        }
        i = e + 1;
    }
    if (!seen_root) {
        rc = SC_ERRF(err, SC_ERR_PARSE, "%s: no <topology> element (not an hwloc XML export)",
                     source);
        goto out;
    }
    if (depth != 0)
        goto truncated;
    /* hwloc allocates nbobjs^2 values before it checks them against the objects: a matrix
     * can only name objects that exist. */
    if (max_nbobjs > n_objects) {
        rc = SC_ERRF(err, SC_ERR_PARSE,
                     "%s: a distance matrix declares %llu objects but the topology has only %zu",
                     source, max_nbobjs, n_objects);
        goto out;
    }
    qsort(ids, n_ids, sizeof(*ids), cmp_u64);
    for (size_t k = 1; k < n_ids; k++) {
        if (ids[k] == ids[k - 1]) {
            rc = SC_ERRF(err, SC_ERR_PARSE,
                         "%s: two objects share gp_index=\"%llu\" (object ids must be unique)",
                         source, ids[k]);
            goto out;
        }
    }
    goto out;
truncated:
    rc = SC_ERRF(err, SC_ERR_PARSE,
                 "%s: truncated hwloc XML (input ends inside an element or with %d element(s) "
                 "still open)",
                 source, depth);
out:
    free(ids);
    return rc;
}
