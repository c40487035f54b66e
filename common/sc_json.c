/*
 * JSON helpers over jansson. jansson keeps no positions for parsed values, so the position of
 * a node is found only when an error is reported: a small scanner walks the source text along
 * the node's path (keys and indices) and counts lines. Errors are rare; parsing stays jansson's.
 */
#include "common/sc_json.h"

#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"

struct sc_jdoc {
    json_t *root;
    char *source;
    char *text; /* NUL-terminated copy of the source text */
    size_t len;
};

sc_status sc_jdoc_parse(sc_jdoc **out, const char *source, const char *text, size_t len,
                        sc_err *err)
{
    *out = NULL;
    /* A UTF-8 byte-order mark, as some editors write, is not JSON but no mistake either: jansson
     * called it an invalid token, printing the invisible mark as the culprit. */
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) {
        text += 3;
        len -= 3;
    }
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (root == NULL)
        return SC_ERRF(err, SC_ERR_PARSE, "%s:%d:%d: invalid JSON: %s", source, jerr.line,
                       jerr.column, jerr.text);
    sc_jdoc *doc = calloc(1, sizeof *doc);
    if (doc == NULL)
        goto nomem;
    doc->root = root;
    doc->source = strdup(source);
    doc->text = malloc(len + 1);
    if (doc->source == NULL || doc->text == NULL)
        goto nomem;
    memcpy(doc->text, text, len);
    doc->text[len] = '\0';
    doc->len = len;
    *out = doc;
    return SC_OK;
nomem:
    sc_jdoc_destroy(&doc);
    if (doc == NULL)
        json_decref(root);
    return SC_ERRF(err, SC_ERR_NOMEM, "%s: out of memory", source);
}

sc_status sc_jdoc_load(sc_jdoc **out, const char *path, size_t max_bytes, sc_err *err)
{
    char *text = NULL;
    size_t len = 0;
    *out = NULL;
    SC_CHECK(sc_file_read(path, max_bytes, &text, &len, err));
    sc_status rc = sc_jdoc_parse(out, path, text, len, err);
    free(text);
    return rc;
}

void sc_jdoc_destroy(sc_jdoc **doc)
{
    if (doc == NULL || *doc == NULL)
        return;
    json_decref((*doc)->root);
    free((*doc)->source);
    free((*doc)->text);
    free(*doc);
    *doc = NULL;
}

sc_jnode sc_jdoc_root(const sc_jdoc *doc)
{
    sc_jnode n = {doc, NULL, NULL, 0, doc->root};
    return n;
}

const char *sc_jdoc_source(const sc_jdoc *doc)
{
    return doc->source;
}

/* ---- paths and positions ----------------------------------------------------------------- */

static bool key_is_plain(const char *key)
{
    if (*key == '\0')
        return false;
    for (const char *p = key; *p; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return false;
    }
    return true;
}

static size_t path_append(const sc_jnode *n, char *buf, size_t size, size_t pos)
{
    if (n->parent == NULL)
        return pos + (size_t)snprintf(buf + pos, pos < size ? size - pos : 0, "$");
    pos = path_append(n->parent, buf, size, pos);
    size_t room = pos < size ? size - pos : 0;
    int w;
    if (n->key != NULL && key_is_plain(n->key))
        w = snprintf(buf + pos, room, ".%s", n->key);
    else if (n->key != NULL)
        w = snprintf(buf + pos, room, "[\"%s\"]", n->key);
    else
        w = snprintf(buf + pos, room, "[%zu]", n->index);
    return pos + (w > 0 ? (size_t)w : 0);
}

void sc_jnode_path(const sc_jnode *node, char *buf, size_t size)
{
    if (size == 0)
        return;
    buf[0] = '\0';
    path_append(node, buf, size, 0);
}

/* A cursor over the source text. */
typedef struct {
    const char *s;
    size_t len;
    size_t pos;
} scan;

static void scan_ws(scan *sc)
{
    while (sc->pos < sc->len) {
        char c = sc->s[sc->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        sc->pos++;
    }
}

/* Skips a string starting at its opening quote; if `out` is non-NULL, copies its content with
 * the simple escapes decoded (enough to compare against keys). */
static bool scan_string(scan *sc, char *out, size_t out_size)
{
    size_t o = 0;
    if (sc->pos >= sc->len || sc->s[sc->pos] != '"')
        return false;
    sc->pos++;
    while (sc->pos < sc->len) {
        char c = sc->s[sc->pos++];
        if (c == '"') {
            if (out != NULL)
                out[o < out_size ? o : out_size - 1] = '\0';
            return true;
        }
        if (c == '\\' && sc->pos < sc->len) {
            char e = sc->s[sc->pos++];
            c = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e == 'b' ? '\b'
                : e == 'f' ? '\f' : e;
        }
        if (out != NULL && o + 1 < out_size)
            out[o++] = c;
    }
    return false;
}

/* Skips one value of any kind (iteratively, so deep nesting cannot exhaust the stack). */
static bool scan_skip_value(scan *sc)
{
    int depth = 0;
    scan_ws(sc);
    do {
        if (sc->pos >= sc->len)
            return false;
        char c = sc->s[sc->pos];
        if (c == '"') {
            if (!scan_string(sc, NULL, 0))
                return false;
        } else if (c == '{' || c == '[') {
            depth++;
            sc->pos++;
        } else if (c == '}' || c == ']') {
            depth--;
            sc->pos++;
        } else {
            sc->pos++; /* numbers, literals, commas, colons, whitespace */
            if (depth == 0) {
                while (sc->pos < sc->len && strchr(",]} \t\r\n", sc->s[sc->pos]) == NULL)
                    sc->pos++;
            }
        }
    } while (depth > 0);
    return true;
}

/* Moves the cursor to the value of `key` in the object at the cursor. */
static bool scan_to_member(scan *sc, const char *key)
{
    scan_ws(sc);
    if (sc->pos >= sc->len || sc->s[sc->pos] != '{')
        return false;
    sc->pos++;
    char name[256];
    for (;;) {
        scan_ws(sc);
        if (sc->pos >= sc->len || sc->s[sc->pos] == '}')
            return false;
        if (!scan_string(sc, name, sizeof name))
            return false;
        scan_ws(sc);
        if (sc->pos >= sc->len || sc->s[sc->pos] != ':')
            return false;
        sc->pos++;
        scan_ws(sc);
        if (strcmp(name, key) == 0)
            return true;
        if (!scan_skip_value(sc))
            return false;
        scan_ws(sc);
        if (sc->pos < sc->len && sc->s[sc->pos] == ',')
            sc->pos++;
    }
}

static bool scan_to_element(scan *sc, size_t index)
{
    scan_ws(sc);
    if (sc->pos >= sc->len || sc->s[sc->pos] != '[')
        return false;
    sc->pos++;
    for (size_t i = 0;; i++) {
        scan_ws(sc);
        if (sc->pos >= sc->len || sc->s[sc->pos] == ']')
            return false;
        if (i == index)
            return true;
        if (!scan_skip_value(sc))
            return false;
        scan_ws(sc);
        if (sc->pos < sc->len && sc->s[sc->pos] == ',')
            sc->pos++;
    }
}

static bool scan_to_node(scan *sc, const sc_jnode *n)
{
    if (n->parent == NULL) {
        scan_ws(sc);
        return true;
    }
    if (!scan_to_node(sc, n->parent))
        return false;
    return n->key != NULL ? scan_to_member(sc, n->key) : scan_to_element(sc, n->index);
}

void sc_jnode_position(const sc_jnode *node, int *line, int *column)
{
    *line = 0;
    *column = 0;
    /* Walk up until a node can be located: a missing member is reported at its parent. */
    for (const sc_jnode *n = node; n != NULL; n = n->parent) {
        scan sc = {n->doc->text, n->doc->len, 0};
        if (!scan_to_node(&sc, n))
            continue;
        int l = 1, c = 1;
        for (size_t i = 0; i < sc.pos; i++) {
            if (sc.s[i] == '\n') {
                l++;
                c = 1;
            } else {
                c++;
            }
        }
        *line = l;
        *column = c;
        return;
    }
}

sc_status sc_jnode_fail(const sc_jnode *node, sc_err *err, sc_status code, const char *fmt, ...)
{
    char path[512];
    char msg[SC_ERR_MSG_MAX / 2];
    int line, column;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sc_jnode_path(node, path, sizeof path);
    sc_jnode_position(node, &line, &column);
    return SC_ERRF(err, code, "%s:%d:%d: %s: %s", node->doc->source, line, column, path, msg);
}

/* Edit distance between a and b (insertions, deletions, substitutions, and swaps of two
 * neighbours, which typing makes often: "stpes"), for keys of at most 63 characters; a larger
 * number past that. */
static size_t key_distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b);
    if (n > 63 || m > 63)
        return 64;
    size_t d[64][64];
    for (size_t i = 0; i <= n; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[n][m];
}

sc_status sc_jnode_known_keys(const sc_jnode *obj, const char *const *known, sc_err *err)
{
    if (!json_is_object(obj->value))
        return SC_OK;
    const char *key;
    json_t *v;
    json_object_foreach(obj->value, key, v) {
        bool ok = false;
        for (size_t i = 0; known[i] != NULL && !ok; i++)
            ok = strcmp(known[i], key) == 0;
        if (ok)
            continue;
        /* the closest known key, when it is close: at most a third of its length apart */
        const char *near = NULL;
        size_t best = SIZE_MAX;
        for (size_t i = 0; known[i] != NULL; i++) {
            size_t d = key_distance(key, known[i]);
            size_t most = strlen(known[i]) / 3 > 1 ? strlen(known[i]) / 3 : 1;
            if (d <= most && d < best) {
                best = d;
                near = known[i];
            }
        }
        char list[600] = "";
        size_t at = 0;
        for (size_t i = 0; known[i] != NULL && at < sizeof list; i++)
            at += (size_t)snprintf(list + at, sizeof list - at, "%s\"%s\"", i ? ", " : "",
                                   known[i]);
        char mean[120] = "";
        if (near != NULL)
            snprintf(mean, sizeof mean, "did you mean \"%s\"? ", near);
        sc_jnode member;
        SC_CHECK(sc_jnode_member(obj, key, &member, err));
        return sc_jnode_fail(&member, err, SC_ERR_INVALID, "unknown key \"%.60s\": %svalid keys here: %s",
                             key, mean, list);
    }
    return SC_OK;
}

void sc_json_describe(const json_t *v, char *buf, size_t size)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        snprintf(buf, size, "an object");
        break;
    case JSON_ARRAY:
        snprintf(buf, size, "an array of %zu", json_array_size(v));
        break;
    case JSON_STRING:
        snprintf(buf, size, "\"%.40s%s\"", json_string_value(v),
                 json_string_length(v) > 40 ? "..." : "");
        break;
    case JSON_INTEGER:
        snprintf(buf, size, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        break;
    case JSON_REAL:
        snprintf(buf, size, "%g", json_real_value(v));
        break;
    case JSON_TRUE:
        snprintf(buf, size, "true");
        break;
    case JSON_FALSE:
        snprintf(buf, size, "false");
        break;
    default:
        snprintf(buf, size, "null");
        break;
    }
}

/* ---- navigation --------------------------------------------------------------------------- */

bool sc_jnode_has(const sc_jnode *obj, const char *key)
{
    return json_is_object(obj->value) && json_object_get(obj->value, key) != NULL;
}

sc_status sc_jnode_member(const sc_jnode *obj, const char *key, sc_jnode *out, sc_err *err)
{
    SC_CHECK(sc_jnode_expect_object(obj, err));
    json_t *v = json_object_get(obj->value, key);
    if (v == NULL)
        return sc_jnode_fail(obj, err, SC_ERR_INVALID, "missing required field \"%s\"", key);
    sc_jnode n = {obj->doc, obj, key, 0, v};
    *out = n;
    return SC_OK;
}

sc_jnode sc_jnode_element(const sc_jnode *arr, size_t i)
{
    assert(json_is_array(arr->value) && i < json_array_size(arr->value));
    sc_jnode n = {arr->doc, arr, NULL, i, json_array_get(arr->value, i)};
    return n;
}

size_t sc_jnode_size(const sc_jnode *node)
{
    if (json_is_array(node->value))
        return json_array_size(node->value);
    if (json_is_object(node->value))
        return json_object_size(node->value);
    return 0;
}

/* ---- node checks -------------------------------------------------------------------------- */

static sc_status wrong_type(const sc_jnode *n, const char *expected, sc_err *err)
{
    char got[96];
    sc_json_describe(n->value, got, sizeof got);
    return sc_jnode_fail(n, err, SC_ERR_INVALID, "expected %s, got %s", expected, got);
}

sc_status sc_jnode_expect_object(const sc_jnode *node, sc_err *err)
{
    return json_is_object(node->value) ? SC_OK : wrong_type(node, "an object", err);
}

sc_status sc_jnode_expect_array(const sc_jnode *node, size_t min_len, size_t max_len, sc_err *err)
{
    if (!json_is_array(node->value))
        return wrong_type(node, "an array", err);
    size_t n = json_array_size(node->value);
    if (n < min_len || n > max_len) {
        if (max_len == SIZE_MAX)
            return sc_jnode_fail(node, err, SC_ERR_INVALID,
                                 "expected an array of at least %zu elements, got %zu", min_len, n);
        return sc_jnode_fail(node, err, SC_ERR_INVALID,
                             "expected an array of %zu to %zu elements, got %zu", min_len, max_len,
                             n);
    }
    return SC_OK;
}

sc_status sc_jnode_number(const sc_jnode *node, double min, double max, double *out, sc_err *err)
{
    char range[96];
    snprintf(range, sizeof range, "a number in [%g, %g]", min, max);
    if (!json_is_number(node->value))
        return wrong_type(node, range, err);
    double v = json_number_value(node->value);
    if (!isfinite(v) || v < min || v > max)
        return wrong_type(node, range, err);
    *out = v;
    return SC_OK;
}

sc_status sc_jnode_int(const sc_jnode *node, int64_t min, int64_t max, int64_t *out, sc_err *err)
{
    char range[96];
    snprintf(range, sizeof range, "an integer in [%lld, %lld]", (long long)min, (long long)max);
    int64_t v;
    if (json_is_integer(node->value)) {
        v = (int64_t)json_integer_value(node->value);
    } else if (json_is_real(node->value)) {
        double d = json_real_value(node->value);
        if (!isfinite(d) || d != floor(d) || d < -9.2e18 || d > 9.2e18)
            return wrong_type(node, range, err);
        v = (int64_t)d;
    } else {
        return wrong_type(node, range, err);
    }
    if (v < min || v > max)
        return wrong_type(node, range, err);
    *out = v;
    return SC_OK;
}

sc_status sc_jnode_string(const sc_jnode *node, const char **out, sc_err *err)
{
    if (!json_is_string(node->value))
        return wrong_type(node, "a string", err);
    *out = json_string_value(node->value);
    return SC_OK;
}

sc_status sc_jnode_bool(const sc_jnode *node, bool *out, sc_err *err)
{
    if (!json_is_boolean(node->value))
        return wrong_type(node, "true or false", err);
    *out = json_is_true(node->value);
    return SC_OK;
}

sc_status sc_jnode_enum(const sc_jnode *node, const char *const *choices, int *out, sc_err *err)
{
    char valid[512];
    size_t pos = 0;
    valid[0] = '\0';
    for (int i = 0; choices[i] != NULL; i++) {
        if (json_is_string(node->value) && strcmp(json_string_value(node->value), choices[i]) == 0) {
            *out = i;
            return SC_OK;
        }
        int w = snprintf(valid + pos, pos < sizeof valid ? sizeof valid - pos : 0, "%s\"%s\"",
                         i ? ", " : "", choices[i]);
        pos += w > 0 ? (size_t)w : 0;
    }
    char got[96];
    sc_json_describe(node->value, got, sizeof got);
    return sc_jnode_fail(node, err, SC_ERR_INVALID, "expected one of %s, got %s", valid, got);
}

/* ---- members ------------------------------------------------------------------------------ */

sc_status sc_json_get_object(const sc_jnode *obj, const char *key, sc_jnode *out, sc_err *err)
{
    SC_CHECK(sc_jnode_member(obj, key, out, err));
    return sc_jnode_expect_object(out, err);
}

sc_status sc_json_get_array(const sc_jnode *obj, const char *key, size_t min_len, size_t max_len,
                            sc_jnode *out, sc_err *err)
{
    SC_CHECK(sc_jnode_member(obj, key, out, err));
    return sc_jnode_expect_array(out, min_len, max_len, err);
}

sc_status sc_json_get_number(const sc_jnode *obj, const char *key, double min, double max,
                             double *out, sc_err *err)
{
    sc_jnode n = {0};
    SC_CHECK(sc_jnode_member(obj, key, &n, err));
    return sc_jnode_number(&n, min, max, out, err);
}

sc_status sc_json_get_int(const sc_jnode *obj, const char *key, int64_t min, int64_t max,
                          int64_t *out, sc_err *err)
{
    sc_jnode n = {0};
    SC_CHECK(sc_jnode_member(obj, key, &n, err));
    return sc_jnode_int(&n, min, max, out, err);
}

sc_status sc_json_get_string(const sc_jnode *obj, const char *key, const char **out, sc_err *err)
{
    sc_jnode n = {0};
    SC_CHECK(sc_jnode_member(obj, key, &n, err));
    return sc_jnode_string(&n, out, err);
}

sc_status sc_json_get_bool(const sc_jnode *obj, const char *key, bool *out, sc_err *err)
{
    sc_jnode n = {0};
    SC_CHECK(sc_jnode_member(obj, key, &n, err));
    return sc_jnode_bool(&n, out, err);
}

sc_status sc_json_get_enum(const sc_jnode *obj, const char *key, const char *const *choices,
                           int *out, sc_err *err)
{
    sc_jnode n = {0};
    SC_CHECK(sc_jnode_member(obj, key, &n, err));
    return sc_jnode_enum(&n, choices, out, err);
}

sc_status sc_json_opt_number(const sc_jnode *obj, const char *key, double min, double max,
                             double def, double *out, sc_err *err)
{
    SC_CHECK(sc_jnode_expect_object(obj, err));
    if (!sc_jnode_has(obj, key)) {
        *out = def;
        return SC_OK;
    }
    return sc_json_get_number(obj, key, min, max, out, err);
}

sc_status sc_json_opt_int(const sc_jnode *obj, const char *key, int64_t min, int64_t max,
                          int64_t def, int64_t *out, sc_err *err)
{
    SC_CHECK(sc_jnode_expect_object(obj, err));
    if (!sc_jnode_has(obj, key)) {
        *out = def;
        return SC_OK;
    }
    return sc_json_get_int(obj, key, min, max, out, err);
}

sc_status sc_json_opt_string(const sc_jnode *obj, const char *key, const char *def,
                             const char **out, sc_err *err)
{
    SC_CHECK(sc_jnode_expect_object(obj, err));
    if (!sc_jnode_has(obj, key)) {
        *out = def;
        return SC_OK;
    }
    return sc_json_get_string(obj, key, out, err);
}

sc_status sc_json_opt_bool(const sc_jnode *obj, const char *key, bool def, bool *out, sc_err *err)
{
    SC_CHECK(sc_jnode_expect_object(obj, err));
    if (!sc_jnode_has(obj, key)) {
        *out = def;
        return SC_OK;
    }
    return sc_json_get_bool(obj, key, out, err);
}

sc_status sc_jdoc_check_format(const sc_jdoc *doc, const char *format, int64_t max_version,
                               int64_t *version, sc_err *err)
{
    sc_jnode root = sc_jdoc_root(doc);
    const char *got = NULL;
    int64_t v = 0;
    SC_CHECK(sc_jnode_expect_object(&root, err));
    SC_CHECK(sc_json_get_string(&root, "format", &got, err));
    if (strcmp(got, format) != 0) {
        sc_jnode n;
        sc_jnode_member(&root, "format", &n, NULL);
        return sc_jnode_fail(&n, err, SC_ERR_INVALID, "expected \"%s\", got \"%s\"", format, got);
    }
    SC_CHECK(sc_json_get_int(&root, "version", 1, INT64_MAX, &v, err));
    if (v > max_version) {
        sc_jnode n;
        sc_jnode_member(&root, "version", &n, NULL);
        return sc_jnode_fail(&n, err, SC_ERR_VERSION,
                             "%s version %lld is newer than this stagecraft reads (up to %lld)",
                             format, (long long)v, (long long)max_version);
    }
    if (version != NULL)
        *version = v;
    return SC_OK;
}
