/*
 * JSON reading over jansson, with errors a user can act on.
 *
 * A document (sc_jdoc) keeps the parsed tree and its source text. A node (sc_jnode) is a value
 * plus the way it was reached (its parent and key or index), so every error names the file, the
 * line and column where the value stands in the source, and its JSON path:
 *
 *   cluster.json:12:19: $.servers[1].nic_bandwidth_bytes_per_s: expected a number > 0, got "fast"
 *
 * Nodes are small values kept on the stack; a child must not outlive its parent node or the
 * document. Documents reject duplicate keys. A reader that knows every key of an object refuses
 * the others with sc_jnode_known_keys (a typo must not pass for an absent optional key).
 * Getters are required unless named `_opt`; an optional key that is present with the wrong type
 * is still an error. Numbers may be written as integers or reals (1e9); integer getters accept a
 * real only when it is integral.
 */
#ifndef SC_JSON_H
#define SC_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sc_status.h"

typedef struct sc_jdoc sc_jdoc;

typedef struct sc_jnode {
    const sc_jdoc *doc;
    const struct sc_jnode *parent; /* NULL for the root */
    const char *key;               /* member name in the parent object, or NULL */
    size_t index;                  /* index in the parent array when key is NULL */
    json_t *value;                 /* borrowed from the document */
} sc_jnode;

/* Parses `len` bytes of `text`; `source` names it in errors (a path, "request", ...). A leading
 * UTF-8 byte-order mark is skipped. */
sc_status sc_jdoc_parse(sc_jdoc **out, const char *source, const char *text, size_t len,
                        sc_err *err);

/* Reads and parses a file of at most `max_bytes` bytes. */
sc_status sc_jdoc_load(sc_jdoc **out, const char *path, size_t max_bytes, sc_err *err);

void sc_jdoc_destroy(sc_jdoc **doc);

sc_jnode sc_jdoc_root(const sc_jdoc *doc);
const char *sc_jdoc_source(const sc_jdoc *doc);

/* Checks "format" == `format` and 1 <= "version" <= `max_version`; `version` may be NULL. */
sc_status sc_jdoc_check_format(const sc_jdoc *doc, const char *format, int64_t max_version,
                               int64_t *version, sc_err *err);

/* Writes the node's JSON path ("$.servers[1].name") into buf. */
void sc_jnode_path(const sc_jnode *node, char *buf, size_t size);

/* 1-based line and column of the node's value in the source (0, 0 if it cannot be found). */
void sc_jnode_position(const sc_jnode *node, int *line, int *column);

/* Records "SOURCE:LINE:COL: PATH: message" in err and returns `code`. */
sc_status sc_jnode_fail(const sc_jnode *node, sc_err *err, sc_status code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Short description of a value's type and value for "got ..." messages. */
void sc_json_describe(const json_t *value, char *buf, size_t size);

/* --- navigation ------------------------------------------------------------------------ */
bool sc_jnode_has(const sc_jnode *obj, const char *key);
sc_status sc_jnode_member(const sc_jnode *obj, const char *key, sc_jnode *out, sc_err *err);
/* Element i of an array node (asserts i < size). */
sc_jnode sc_jnode_element(const sc_jnode *arr, size_t i);
/* Number of elements (array) or members (object); 0 for anything else. */
size_t sc_jnode_size(const sc_jnode *node);

/* --- checks on a node ---------------------------------------------------------------------- */
sc_status sc_jnode_expect_object(const sc_jnode *node, sc_err *err);
sc_status sc_jnode_expect_array(const sc_jnode *node, size_t min_len, size_t max_len, sc_err *err);
sc_status sc_jnode_number(const sc_jnode *node, double min, double max, double *out, sc_err *err);
sc_status sc_jnode_int(const sc_jnode *node, int64_t min, int64_t max, int64_t *out, sc_err *err);
sc_status sc_jnode_string(const sc_jnode *node, const char **out, sc_err *err);
sc_status sc_jnode_bool(const sc_jnode *node, bool *out, sc_err *err);
/* The node is a string equal to one of `choices` (NULL-terminated); *out is its index. */
sc_status sc_jnode_enum(const sc_jnode *node, const char *const *choices, int *out, sc_err *err);

/* Refuses a member of object `obj` whose key is not in `known` (NULL-terminated): SC_ERR_INVALID
 * naming the key, its position and JSON path, the closest known key when one is close ("did you
 * mean"), and every known key. SC_OK when all are known. */
sc_status sc_jnode_known_keys(const sc_jnode *obj, const char *const *known, sc_err *err);

/* --- members of an object node: required ---------------------------------------------------- */
sc_status sc_json_get_object(const sc_jnode *obj, const char *key, sc_jnode *out, sc_err *err);
sc_status sc_json_get_array(const sc_jnode *obj, const char *key, size_t min_len, size_t max_len,
                            sc_jnode *out, sc_err *err);
sc_status sc_json_get_number(const sc_jnode *obj, const char *key, double min, double max,
                             double *out, sc_err *err);
sc_status sc_json_get_int(const sc_jnode *obj, const char *key, int64_t min, int64_t max,
                          int64_t *out, sc_err *err);
sc_status sc_json_get_string(const sc_jnode *obj, const char *key, const char **out, sc_err *err);
sc_status sc_json_get_bool(const sc_jnode *obj, const char *key, bool *out, sc_err *err);
sc_status sc_json_get_enum(const sc_jnode *obj, const char *key, const char *const *choices,
                           int *out, sc_err *err);

/* --- members of an object node: optional, `def` when absent -------------------------------- */
sc_status sc_json_opt_number(const sc_jnode *obj, const char *key, double min, double max,
                             double def, double *out, sc_err *err);
sc_status sc_json_opt_int(const sc_jnode *obj, const char *key, int64_t min, int64_t max,
                          int64_t def, int64_t *out, sc_err *err);
sc_status sc_json_opt_string(const sc_jnode *obj, const char *key, const char *def,
                             const char **out, sc_err *err);
sc_status sc_json_opt_bool(const sc_jnode *obj, const char *key, bool def, bool *out, sc_err *err);

#endif /* SC_JSON_H */
