/*
 * plan_profile_load: plan_profile_load, a profile file read and handed to the reader of its
 * format.
 *
 * JSON when the first non-blank character (after a UTF-8 byte order mark) opens a JSON value,
 * else graph.txt (whose lines start with a node id); a file with NUL bytes is refused as
 * binary. Does not parse either format (plan_profile_json.c, plan_profile_graph.c).
 * Invariant: the file is read whole, up to PLAN_PROFILE_MAX_BYTES, and freed before returning.
 */
#include "coordinator/planner/plan_profile.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"

sc_status plan_profile_load(plan_profile **out, const char *path, sc_err *err)
{
    char *text = NULL;
    size_t len = 0;
    *out = NULL;
    SC_CHECK(sc_file_read(path, PLAN_PROFILE_MAX_BYTES, &text, &len, err));
    size_t bom = len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0; /* UTF-8 mark */
    const char *s = text + bom;
    while (*s && isspace((unsigned char)*s))
        s++;
    sc_status rc;
    if (*s == '{' || *s == '[' || *s == '"') /* JSON (a graph.txt line starts with a node id) */
        rc = plan_profile_parse_json(out, path, text + bom, len - bom, err);
    else if (memchr(text, '\0', len) != NULL)
        rc = SC_ERRF(err, SC_ERR_PARSE,
                     "%s: binary data; expected a stagecraft-profile JSON or a PipeDream graph.txt",
                     path);
    else
        rc = plan_profile_parse_graph(out, path, text, err);
    free(text);
    return rc;
}
