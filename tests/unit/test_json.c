/* common/sc_json: typed getters, and errors naming file, line, column and JSON path. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "common/sc_json.h"

static const char cluster_text[] =
    "{\"format\": \"stagecraft-cluster\", \"version\": 1,\n"
    " \"servers\": [\n"
    "   {\"name\": \"s0\", \"gpus\": 2, \"bw\": 1e9},\n"
    "   {\"name\": \"s1\", \"gpus\": 2.5, \"bw\": \"fast\"}\n"
    " ]}\n";

static sc_jdoc *parse(const char *text)
{
    sc_jdoc *doc = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(sc_jdoc_parse(&doc, "cluster.json", text, strlen(text), &err), SC_OK);
    return doc;
}

static void test_getters(void **state)
{
    (void)state;
    sc_jdoc *doc = parse(cluster_text);
    sc_jnode root = sc_jdoc_root(doc), servers, s0;
    sc_err err;
    sc_err_clear(&err);
    int64_t version;
    assert_int_equal(sc_jdoc_check_format(doc, "stagecraft-cluster", 1, &version, &err), SC_OK);
    assert_int_equal(version, 1);
    assert_int_equal(sc_json_get_array(&root, "servers", 1, 8, &servers, &err), SC_OK);
    assert_int_equal(sc_jnode_size(&servers), 2);
    s0 = sc_jnode_element(&servers, 0);
    const char *name;
    int64_t gpus;
    double bw, missing;
    assert_int_equal(sc_json_get_string(&s0, "name", &name, &err), SC_OK);
    assert_string_equal(name, "s0");
    assert_int_equal(sc_json_get_int(&s0, "gpus", 1, 64, &gpus, &err), SC_OK);
    assert_int_equal(gpus, 2);
    /* 1e9 is a real in JSON but integral: accepted by both getters */
    assert_int_equal(sc_json_get_number(&s0, "bw", 1, 1e12, &bw, &err), SC_OK);
    assert_true(bw == 1e9);
    int64_t bw_int;
    assert_int_equal(sc_json_get_int(&s0, "bw", 1, INT64_MAX, &bw_int, &err), SC_OK);
    assert_int_equal(bw_int, 1000000000);
    assert_int_equal(sc_json_opt_number(&s0, "memory", 0, 1e15, 7.0, &missing, &err), SC_OK);
    assert_true(missing == 7.0);
    assert_int_equal(err.code, SC_OK);
    sc_jdoc_destroy(&doc);
    assert_null(doc);
    sc_jdoc_destroy(&doc); /* NULL accepted */
}

static void test_bad_field_has_position_and_path(void **state)
{
    (void)state;
    sc_jdoc *doc = parse(cluster_text);
    sc_jnode root = sc_jdoc_root(doc), servers, s1;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(sc_json_get_array(&root, "servers", 1, 8, &servers, &err), SC_OK);
    s1 = sc_jnode_element(&servers, 1);
    double bw;
    assert_int_equal(sc_json_get_number(&s1, "bw", 1, 1e12, &bw, &err), SC_ERR_INVALID);
    /* "bw": "fast" stands on line 4; its value starts at column 38 */
    assert_string_equal(err.msg, "cluster.json:4:38: $.servers[1].bw: expected a number in "
                                 "[1, 1e+12], got \"fast\"");

    sc_err_clear(&err);
    int64_t gpus;
    assert_int_equal(sc_json_get_int(&s1, "gpus", 1, 64, &gpus, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "cluster.json:4:"));
    assert_non_null(strstr(err.msg, "$.servers[1].gpus"));
    assert_non_null(strstr(err.msg, "got 2.5"));

    /* a missing field is reported at its object, with the field's name */
    sc_err_clear(&err);
    const char *s;
    assert_int_equal(sc_json_get_string(&s1, "devices", &s, &err), SC_ERR_INVALID);
    assert_string_equal(err.msg, "cluster.json:4:4: $.servers[1]: missing required field "
                                 "\"devices\"");
    sc_jdoc_destroy(&doc);
}

static void test_enum_and_quoted_keys(void **state)
{
    (void)state;
    sc_jdoc *doc = parse("{\"a b\": {\"schedule\": \"zigzag\"}}");
    sc_jnode root = sc_jdoc_root(doc), ab;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(sc_json_get_object(&root, "a b", &ab, &err), SC_OK);
    static const char *const schedules[] = {"gpipe", "1f1b", NULL};
    int which = -1;
    assert_int_equal(sc_json_get_enum(&ab, "schedule", schedules, &which, &err), SC_ERR_INVALID);
    assert_string_equal(err.msg, "cluster.json:1:22: $[\"a b\"].schedule: expected one of "
                                 "\"gpipe\", \"1f1b\", got \"zigzag\"");
    sc_jdoc_destroy(&doc);
}

static void test_parse_errors(void **state)
{
    (void)state;
    sc_jdoc *doc = NULL;
    sc_err err;
    sc_err_clear(&err);
    const char *bad = "{\"a\": 1,\n \"b\": }";
    assert_int_equal(sc_jdoc_parse(&doc, "job.json", bad, strlen(bad), &err), SC_ERR_PARSE);
    assert_null(doc);
    assert_non_null(strstr(err.msg, "job.json:2:"));
    sc_err_clear(&err);
    const char *dup = "{\"a\": 1, \"a\": 2}";
    assert_int_equal(sc_jdoc_parse(&doc, "job.json", dup, strlen(dup), &err), SC_ERR_PARSE);
    assert_non_null(strstr(err.msg, "duplicate"));
    /* deeply nested input: refused by the parser, no crash */
    char deep[40001];
    memset(deep, '[', 20000);
    memset(deep + 20000, ']', 20000);
    deep[40000] = '\0';
    sc_err_clear(&err);
    assert_int_equal(sc_jdoc_parse(&doc, "deep.json", deep, strlen(deep), &err), SC_ERR_PARSE);
    /* a UTF-8 byte-order mark before the document is skipped; positions count from after it */
    const char *bom = "\xEF\xBB\xBF{\"a\": 1,\n \"b\": \"x\"}";
    sc_err_clear(&err);
    assert_int_equal(sc_jdoc_parse(&doc, "bom.json", bom, strlen(bom), &err), SC_OK);
    sc_jnode root = sc_jdoc_root(doc);
    int64_t a = 0;
    assert_int_equal(sc_json_get_int(&root, "a", 0, 9, &a, &err), SC_OK);
    assert_int_equal(a, 1);
    assert_int_equal(sc_json_get_int(&root, "b", 0, 9, &a, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "bom.json:2:7: $.b: expected an integer"));
    sc_jdoc_destroy(&doc);
}

static void test_format_and_version(void **state)
{
    (void)state;
    sc_err err;
    sc_jdoc *doc = parse("{\"format\": \"stagecraft-plan\", \"version\": 1}");
    sc_err_clear(&err);
    assert_int_equal(sc_jdoc_check_format(doc, "stagecraft-cluster", 1, NULL, &err),
                     SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "expected \"stagecraft-cluster\", got \"stagecraft-plan\""));
    sc_jdoc_destroy(&doc);

    doc = parse("{\"format\": \"stagecraft-cluster\", \"version\": 3}");
    sc_err_clear(&err);
    assert_int_equal(sc_jdoc_check_format(doc, "stagecraft-cluster", 1, NULL, &err), SC_ERR_VERSION);
    assert_non_null(strstr(err.msg, "version 3"));
    assert_non_null(strstr(err.msg, "up to 1"));
    sc_jdoc_destroy(&doc);

    doc = parse("[1, 2]");
    sc_err_clear(&err);
    assert_int_equal(sc_jdoc_check_format(doc, "stagecraft-cluster", 1, NULL, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "expected an object, got an array of 2"));
    sc_jdoc_destroy(&doc);
}

/* sc_jnode_known_keys: a key not in the list is refused with its position, path, the closest
 * known key when one is close (a swap of two neighbours counts as one edit) and the list; a
 * key far from every known one gets no suggestion; known keys pass. */
static void test_known_keys(void **state)
{
    (void)state;
    static const char *const known[] = {"steps", "seed", "checkpoint_every", NULL};
    sc_jdoc *doc = parse("{\"seed\": 1,\n \"stpes\": 5}");
    sc_jnode root = sc_jdoc_root(doc);
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(sc_jnode_known_keys(&root, known, &err), SC_ERR_INVALID);
    assert_string_equal(err.msg, "cluster.json:2:11: $.stpes: unknown key \"stpes\": did you "
                                 "mean \"steps\"? valid keys here: \"steps\", \"seed\", "
                                 "\"checkpoint_every\"");
    sc_jdoc_destroy(&doc);

    doc = parse("{\"precision\": \"bf16\"}");
    root = sc_jdoc_root(doc);
    sc_err_clear(&err);
    assert_int_equal(sc_jnode_known_keys(&root, known, &err), SC_ERR_INVALID);
    assert_null(strstr(err.msg, "did you mean"));
    assert_non_null(strstr(err.msg, "$.precision: unknown key \"precision\": valid keys here"));
    sc_jdoc_destroy(&doc);

    doc = parse("{\"checkpoint_every\": 2, \"steps\": 3}");
    root = sc_jdoc_root(doc);
    sc_err_clear(&err);
    assert_int_equal(sc_jnode_known_keys(&root, known, &err), SC_OK);
    sc_jdoc_destroy(&doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_getters),
        cmocka_unit_test(test_bad_field_has_position_and_path),
        cmocka_unit_test(test_enum_and_quoted_keys),
        cmocka_unit_test(test_known_keys),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_format_and_version),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
