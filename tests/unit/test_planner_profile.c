/* coordinator/planner/plan_profile: JSON and PipeDream graph.txt readers, time scaling,
 * one-line errors for malformed files, and a graph in another topological order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coordinator/planner/plan_profile.h"

#define DATA SC_TEST_DATA_DIR "/planner/"

static plan_profile *load_ok(const char *path)
{
    plan_profile *p = NULL;
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = plan_profile_load(&p, path, &err);
    if (rc != SC_OK)
        print_error("%s\n", err.msg);
    assert_int_equal(rc, SC_OK);
    return p;
}

static void load_fails(const char *path, sc_status want, const char *const *needles)
{
    plan_profile *p = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_profile_load(&p, path, &err), want);
    assert_null(p);
    assert_null(strchr(err.msg, '\n')); /* one line */
    for (int i = 0; needles[i]; i++) {
        if (strstr(err.msg, needles[i]) == NULL)
            print_error("message '%s' lacks '%s'\n", err.msg, needles[i]);
        assert_non_null(strstr(err.msg, needles[i]));
    }
}

static void test_json_profile(void **state)
{
    (void)state;
    plan_profile *p = load_ok(DATA "tiny.json");
    assert_int_equal(p->kind, PLAN_PROFILE_JSON);
    assert_int_equal(p->n_blocks, 4);
    assert_int_equal(p->microbatch_size, 4);
    assert_string_equal(p->model, "tiny");
    assert_string_equal(p->reference_device, "ref");
    assert_string_equal(p->blocks[3].name, "head");
    assert_true(p->blocks[1].forward_s == 0.003);
    assert_true(p->blocks[0].stash_bytes == 8192);
    /* stash_bytes defaults to the activation */
    assert_true(p->blocks[1].stash_bytes == 4096);
    assert_int_equal(p->blocks[0].n_sizes, 2);
    /* JSON profiles are chains: no graph */
    assert_null(p->pred_start);
    assert_null(p->pred);
    assert_int_equal(p->dag_source, -1);
    plan_profile_destroy(&p);
    assert_null(p);
    plan_profile_destroy(&p);
}

static void test_time_scaling(void **state)
{
    (void)state;
    plan_profile *p = load_ok(DATA "tiny.json");
    double f, b;
    /* no measured sizes: linear in the size (reference 4 samples) */
    plan_profile_block_time(p, 1, 2, 0, &f, &b);
    assert_float_equal(f, 0.0015, 1e-15);
    assert_float_equal(b, 0.003, 1e-15);
    /* measured at 1 and 4: interpolated at 2 */
    plan_profile_block_time(p, 0, 2, 0, &f, &b);
    assert_float_equal(f, 0.0004 + (0.001 - 0.0004) / 3, 1e-15);
    assert_float_equal(b, 0.0008 + (0.002 - 0.0008) / 3, 1e-15);
    /* beyond the last point: along the last segment */
    plan_profile_block_time(p, 0, 7, 0, &f, &b);
    assert_float_equal(f, 0.001 + 3 * (0.0006 / 3), 1e-15);
    /* below the first point: proportional */
    plan_profile_block_time(p, 0, 0.5, 0, &f, &b);
    assert_float_equal(f, 0.0002, 1e-15);
    assert_float_equal(plan_profile_size_factor(p, 8, 0), 2.0, 0);
    plan_profile_destroy(&p);
}

/* Writes `text` to a temporary file and loads it (plan_profile_load: the format is detected). */
static sc_status load_text(const char *text, plan_profile **p, sc_err *err)
{
    char path[] = "/tmp/test_planner_profile_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    sc_err_clear(err);
    sc_status rc = plan_profile_load(p, path, err);
    unlink(path);
    return rc;
}

/* Beyond the largest measured size, a last segment that falls (measurement noise) must not
 * take times to zero: the slope is at least the whole range's, or proportional. */
static void test_extrapolation_never_free(void **state)
{
    (void)state;
    const char *noisy =
        "{\"format\": \"stagecraft-profile\", \"version\": 1, \"microbatch_size\": 8, \"blocks\": "
        "[{\"name\": \"a\", \"forward_s\": 0.0395, \"backward_s\": 0.079, \"activation_bytes\": 1,"
        "  \"by_microbatch_size\": [{\"size\": 1, \"forward_s\": 0.010, \"backward_s\": 0.020},"
        "   {\"size\": 2, \"forward_s\": 0.020, \"backward_s\": 0.040},"
        "   {\"size\": 4, \"forward_s\": 0.040, \"backward_s\": 0.080},"
        "   {\"size\": 8, \"forward_s\": 0.0395, \"backward_s\": 0.079}]},"
        " {\"name\": \"b\", \"forward_s\": 0.01, \"backward_s\": 0.02, \"activation_bytes\": 1,"
        "  \"by_microbatch_size\": [{\"size\": 1, \"forward_s\": 0.02, \"backward_s\": 0.04},"
        "   {\"size\": 8, \"forward_s\": 0.01, \"backward_s\": 0.02}]}]}";
    plan_profile *p = NULL;
    sc_err err;
    assert_int_equal(plan_profile_parse_json(&p, "noisy.json", noisy, strlen(noisy), &err), SC_OK);
    double f, b;
    /* the last segment falls; the whole range rises by 0.0295 s over 7 samples */
    plan_profile_block_time(p, 0, 1024, 0, &f, &b);
    assert_float_equal(f, 0.0395 + 0.0295 / 7 * 1016, 1e-12);
    assert_float_equal(b, 0.079 + 0.059 / 7 * 1016, 1e-12);
    /* between measured sizes nothing changes */
    plan_profile_block_time(p, 0, 6, 0, &f, &b);
    assert_float_equal(f, 0.040 - 0.0005 / 2, 1e-15);
    /* times that fall over the whole range: in proportion to the largest size's */
    plan_profile_block_time(p, 1, 16, 0, &f, &b);
    assert_float_equal(f, 0.02, 1e-15);
    assert_float_equal(b, 0.04, 1e-15);
    plan_profile_destroy(&p);
}

/* Profiles without any time, at the top level something other than an object, a byte-order
 * mark, and a graph whose ids are neither in file nor in dependency order. */
static void test_edges_of_the_formats(void **state)
{
    (void)state;
    plan_profile *p = NULL;
    sc_err err;
    assert_int_equal(
        load_text("{\"format\": \"stagecraft-profile\", \"version\": 1, \"microbatch_size\": 1,\n"
                  " \"blocks\": [{\"name\": \"a\", \"forward_s\": 0, \"backward_s\": 0, "
                  "\"activation_bytes\": 1}]}",
                  &p, &err),
        SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, ":2:"));
    assert_non_null(strstr(err.msg, "$.blocks"));
    assert_non_null(strstr(err.msg, "are 0"));
    assert_int_equal(load_text("node1 -- Input -- forward_compute_time=1.0, "
                               "backward_compute_time=1.0, activation_size=4, parameter_size=0\n"
                               "node2 -- Relu -- forward_compute_time=0, "
                               "backward_compute_time=0, activation_size=4, parameter_size=0\n"
                               "\tnode1 -- node2\n",
                               &p, &err),
                     SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "expected measured times"));
    /* block names are unique: the second use is named with its path */
    assert_int_equal(
        load_text(
            "{\"format\": \"stagecraft-profile\", \"version\": 1, \"microbatch_size\": 1,\n"
            " \"blocks\": [{\"name\": \"a\", \"forward_s\": 1, \"backward_s\": 1, "
            "\"activation_bytes\": 1},\n {\"name\": \"b\", \"forward_s\": 1, \"backward_s\": 1, "
            "\"activation_bytes\": 1},\n {\"name\": \"a\", \"forward_s\": 1, \"backward_s\": 1, "
            "\"activation_bytes\": 1}]}",
            &p, &err),
        SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, ":4:"));
    assert_non_null(strstr(err.msg, "$.blocks[2].name"));
    assert_non_null(strstr(err.msg, "unique"));
    /* JSON whose top level is an array: a JSON error, not a graph.txt one */
    assert_int_not_equal(load_text("[1, 2]", &p, &err), SC_OK);
    assert_null(strstr(err.msg, "node line"));
    assert_non_null(strstr(err.msg, "object"));
    assert_int_equal(load_text("\xEF\xBB\xBF{\"format\": \"stagecraft-profile\", \"version\": 1, "
                               "\"microbatch_size\": 1, \"blocks\": [{\"name\": \"a\", "
                               "\"forward_s\": 1, \"backward_s\": 2, \"activation_bytes\": 1}]}",
                               &p, &err),
                     SC_OK);
    assert_int_equal(p->n_blocks, 1);
    plan_profile_destroy(&p);
    /* 300 nodes in scrambled file order, a chain from the highest id down plus a second source:
     * Kahn's order follows the edges, and among ready nodes the smaller id number */
    enum { N = 300 };
    char *text = malloc(N * 160 + N * 40 + 1);
    assert_non_null(text);
    size_t at = 0;
    for (int k = 0; k < N; k++) {
        int id = (k * 7) % N + 1; /* 7 and 300 are coprime: every id once */
        at += (size_t)sprintf(text + at,
                              "node%d -- Relu -- forward_compute_time=1.0, "
                              "backward_compute_time=2.0, activation_size=4, parameter_size=0\n",
                              id);
    }
    for (int id = N; id > 2; id--) /* node300 -> node299 -> ... -> node2; node1 alone */
        at += (size_t)sprintf(text + at, "\tnode%d -- node%d\n", id, id - 1);
    text[at] = '\0';
    assert_int_equal(load_text(text, &p, &err), SC_OK);
    free(text);
    assert_int_equal(p->n_blocks, N);
    assert_string_equal(p->blocks[0].name, "node1");
    for (int l = 1; l < N; l++) {
        char want[16];
        snprintf(want, sizeof want, "node%d", N + 1 - l);
        assert_string_equal(p->blocks[l].name, want);
    }
    plan_profile_destroy(&p);
}

static void test_graph_profile(void **state)
{
    (void)state;
    plan_profile *p = load_ok(DATA "tiny.graph.txt");
    assert_int_equal(p->kind, PLAN_PROFILE_PIPEDREAM);
    assert_int_equal(p->microbatch_size, 0);
    /* __getitem__ sink dropped; Input first and zeroed */
    assert_int_equal(p->n_blocks, 4);
    assert_string_equal(p->blocks[0].name, "node1");
    assert_true(p->blocks[0].forward_s == 0 && p->blocks[0].activation_bytes == 0);
    assert_string_equal(p->blocks[1].name, "node2");
    assert_string_equal(p->blocks[2].name, "node3");
    assert_string_equal(p->blocks[3].name, "node4");
    /* milliseconds become seconds */
    assert_float_equal(p->blocks[2].forward_s, 0.002, 1e-15);
    assert_float_equal(p->blocks[2].backward_s, 0.003, 1e-15);
    /* node2's output is needed by node3 and node4: it crosses both cuts; node3's list
     * activation [10; 20] is summed */
    assert_true(p->blocks[1].activation_bytes == 1000);
    assert_true(p->blocks[2].activation_bytes == 1030);
    assert_true(p->blocks[3].activation_bytes == 7);
    assert_true(p->blocks[1].parameter_bytes == 400);
    /* the DAG is kept over the linear positions; the Input's edge and the dropped sink's
     * edge are gone; node2 is the first source in file order once the Input is removed */
    assert_non_null(p->pred_start);
    assert_int_equal(p->n_input_blocks, 1);
    assert_int_equal(p->dag_source, 1);
    const int start[5] = {0, 0, 0, 1, 3}, pred[3] = {1, 1, 2};
    for (int l = 0; l <= 4; l++)
        assert_int_equal(p->pred_start[l], start[l]);
    for (int e = 0; e < 3; e++)
        assert_int_equal(p->pred[e], pred[e]);
    /* graph.txt times are for the whole minibatch: factor = samples / batch */
    double f, b;
    plan_profile_block_time(p, 1, 8, 32, &f, &b);
    assert_float_equal(f, 0.001 / 4, 1e-15);
    plan_profile_destroy(&p);
}

static void test_malformed(void **state)
{
    (void)state;
    load_fails(DATA "bad_field.json", SC_ERR_INVALID,
               (const char *const[]){"bad_field.json:4:", "$.blocks[1].forward_s", "number", NULL});
    load_fails(DATA "bad_version.json", SC_ERR_VERSION,
               (const char *const[]){"bad_version.json", "version 7", NULL});
    load_fails(DATA "bad_syntax.json", SC_ERR_PARSE,
               (const char *const[]){"bad_syntax.json:2:", NULL});
    load_fails(
        DATA "bad_metric.graph.txt", SC_ERR_PARSE,
        (const char *const[]){"bad_metric.graph.txt:2:", "forward_compute_time", "abc", NULL});
    load_fails(DATA "bad_edge.graph.txt", SC_ERR_PARSE,
               (const char *const[]){"bad_edge.graph.txt:3:", "node9", NULL});
    load_fails(DATA "cycle.graph.txt", SC_ERR_PARSE,
               (const char *const[]){"cycle.graph.txt", "cycle", NULL});
    load_fails(DATA "no_such_file.json", SC_ERR_IO,
               (const char *const[]){"no_such_file.json", NULL});
}

static void test_inline_texts(void **state)
{
    (void)state;
    plan_profile *p = NULL;
    sc_err err;
    sc_err_clear(&err);
    /* a node line without metrics */
    const char *t1 = "node1 -- Conv\n";
    assert_int_equal(plan_profile_parse_graph(&p, "x.txt", t1, &err), SC_ERR_PARSE);
    assert_non_null(strstr(err.msg, "x.txt:1:"));
    /* by_microbatch_size must increase */
    sc_err_clear(&err);
    const char *t2 = "{\"format\": \"stagecraft-profile\", \"version\": 1, \"microbatch_size\": 2,"
                     " \"blocks\": [{\"name\": \"a\", \"forward_s\": 1, \"backward_s\": 1,"
                     " \"activation_bytes\": 1, \"by_microbatch_size\": ["
                     "{\"size\": 2, \"forward_s\": 1, \"backward_s\": 1},"
                     "{\"size\": 2, \"forward_s\": 1, \"backward_s\": 1}]}]}";
    assert_int_equal(plan_profile_parse_json(&p, "y.json", t2, strlen(t2), &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "by_microbatch_size[1].size"));
    /* wrong format name */
    sc_err_clear(&err);
    const char *t3 = "{\"format\": \"stagecraft-cluster\", \"version\": 1}";
    assert_int_equal(plan_profile_parse_json(&p, "z.json", t3, strlen(t3), &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "stagecraft-profile"));
    /* a list value needs at least one number and no dangling ';'; numbers are decimal */
    static const char *const lists[] = {"[]", "[1;]", "[1; ]", "[;]", "0x10", "[1; 0x2]", "-0X1"};
    for (size_t i = 0; i < sizeof lists / sizeof *lists; i++) {
        char text[256];
        snprintf(text, sizeof text,
                 "node1 -- A -- forward_compute_time=1, backward_compute_time=%s, "
                 "activation_size=1, parameter_size=0\n",
                 lists[i]);
        sc_err_clear(&err);
        assert_int_equal(plan_profile_parse_graph(&p, "l.txt", text, &err), SC_ERR_PARSE);
        assert_non_null(strstr(err.msg, "l.txt:1: backward_compute_time"));
        assert_null(p);
    }
    sc_err_clear(&err);
    const char *t4 = "node1 -- A -- forward_compute_time=1, backward_compute_time=1, "
                     "activation_size=[1; 2], parameter_size=0\n";
    assert_int_equal(plan_profile_parse_graph(&p, "l.txt", t4, &err), SC_OK);
    plan_profile_destroy(&p);
    /* an empty profile */
    sc_err_clear(&err);
    assert_int_equal(plan_profile_parse_graph(&p, "e.txt", "\n\n", &err), SC_ERR_PARSE);
    assert_null(p);
}

/* Two branches joined: A -> X1 -> X2 -> J, A -> Y1 -> Y2 -> J, J -> T, with Input0 feeding A.
 * Outputs (bytes): A 100, X1 10, X2 20, Y1 30, Y2 40, J 50, T 60. The profile's order is
 * Input0, A, X1, X2, Y1, Y2, J, T (node1..node8). */
static const char *const two_branches =
    "node1 -- Input0 -- forward_compute_time=0, backward_compute_time=0, activation_size=0, "
    "parameter_size=0\n"
    "node2 -- A -- forward_compute_time=9, backward_compute_time=9, activation_size=100, "
    "parameter_size=1\n"
    "node3 -- X1 -- forward_compute_time=8, backward_compute_time=8, activation_size=10, "
    "parameter_size=2\n"
    "node4 -- X2 -- forward_compute_time=9, backward_compute_time=9, activation_size=20, "
    "parameter_size=3\n"
    "node5 -- Y1 -- forward_compute_time=4, backward_compute_time=4, activation_size=30, "
    "parameter_size=4\n"
    "node6 -- Y2 -- forward_compute_time=2, backward_compute_time=2, activation_size=40, "
    "parameter_size=5\n"
    "node7 -- J -- forward_compute_time=1, backward_compute_time=1, activation_size=50, "
    "parameter_size=6\n"
    "node8 -- T -- forward_compute_time=2, backward_compute_time=2, activation_size=60, "
    "parameter_size=7\n"
    "\tnode1 -- node2\n\tnode2 -- node3\n\tnode3 -- node4\n\tnode2 -- node5\n"
    "\tnode5 -- node6\n\tnode4 -- node7\n\tnode6 -- node7\n\tnode7 -- node8\n";

static void test_reorder(void **state)
{
    (void)state;
    plan_profile *p = NULL, *q = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_profile_parse_graph(&p, "two.graph.txt", two_branches, &err), SC_OK);
    assert_int_equal(p->n_blocks, 8);
    /* what crosses each cut of the profile's own order: after X1, A (still needed by Y1) and
     * X1; after X2, A and X2; after Y1, X2 and Y1; after Y2, X2 and Y2; the last block's own */
    const double own[8] = {0, 100, 110, 120, 50, 60, 50, 60};
    const int identity[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    assert_int_equal(plan_profile_reorder(&q, p, identity, &err), SC_OK);
    for (int l = 0; l < 8; l++) {
        assert_true(p->blocks[l].activation_bytes == own[l]);
        assert_true(q->blocks[l].activation_bytes == own[l]);
    }
    plan_profile_destroy(&q);
    /* Input0, A, Y1, X1, Y2, X2, J, T: after Y1, A and Y1; after X1, Y1 and X1 (A's last
     * consumer is X1); after Y2, X1 and Y2; after X2, Y2 and X2 */
    const int order[8] = {0, 1, 4, 2, 5, 3, 6, 7};
    const double moved[8] = {0, 100, 130, 40, 50, 60, 50, 60};
    const char *names[8] = {"node1", "node2", "node5", "node3", "node6", "node4", "node7", "node8"};
    assert_int_equal(plan_profile_reorder(&q, p, order, &err), SC_OK);
    assert_int_equal(q->n_blocks, 8);
    assert_int_equal(q->kind, PLAN_PROFILE_PIPEDREAM);
    assert_int_equal(q->microbatch_size, 0);
    assert_int_equal(q->n_input_blocks, 1);
    assert_int_equal(q->dag_source, 1);
    assert_string_equal(q->model, "two.graph.txt");
    for (int i = 0; i < 8; i++) {
        assert_string_equal(q->blocks[i].name, names[i]);
        assert_true(q->blocks[i].activation_bytes == moved[i]);
        assert_true(q->blocks[i].forward_s == p->blocks[order[i]].forward_s);
        assert_true(q->blocks[i].parameter_bytes == p->blocks[order[i]].parameter_bytes);
        assert_true(q->blocks[i].stash_bytes == p->blocks[order[i]].stash_bytes);
    }
    /* the DAG renumbered: Y1 (2) <- A (1); X1 (3) <- A; Y2 (4) <- Y1; X2 (5) <- X1;
     * J (6) <- X2, Y2 (sorted: 4, 5); T (7) <- J */
    const int start[9] = {0, 0, 0, 1, 2, 3, 4, 6, 7}, pred[7] = {1, 1, 2, 3, 4, 5, 6};
    for (int i = 0; i <= 8; i++)
        assert_int_equal(q->pred_start[i], start[i]);
    for (int e = 0; e < 7; e++)
        assert_int_equal(q->pred[e], pred[e]);
    plan_profile_destroy(&q);
    /* orders that are not topological orders keeping the Input first, one-line errors */
    const int before_input[8] = {0, 1, 2, 6, 3, 4, 5, 7}; /* J before X2 */
    const int input_moved[8] = {1, 0, 2, 3, 4, 5, 6, 7};  /* Input0 after A */
    const int twice[8] = {0, 1, 2, 2, 4, 5, 6, 7};        /* X1 twice, X2 never */
    const int *bad[3] = {before_input, input_moved, twice};
    const char *needle[3] = {"puts 'node7' before its input 'node4'", "Input block(s) must stay",
                             "entry 3 is 2"};
    for (int k = 0; k < 3; k++) {
        sc_err_clear(&err);
        assert_int_equal(plan_profile_reorder(&q, p, bad[k], &err), SC_ERR_INVALID);
        assert_null(q);
        if (strstr(err.msg, needle[k]) == NULL)
            print_error("message '%s' lacks '%s'\n", err.msg, needle[k]);
        assert_non_null(strstr(err.msg, needle[k]));
        assert_non_null(strstr(err.msg, "two.graph.txt"));
        assert_null(strchr(err.msg, '\n'));
    }
    plan_profile_destroy(&p);
    /* a JSON profile is a chain: there is no other order to take */
    p = load_ok(DATA "tiny.json");
    sc_err_clear(&err);
    assert_int_equal(plan_profile_reorder(&q, p, identity, &err), SC_ERR_INVALID);
    assert_null(q);
    assert_non_null(strstr(err.msg, "graph.txt"));
    plan_profile_destroy(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_profile),
        cmocka_unit_test(test_time_scaling),
        cmocka_unit_test(test_graph_profile),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_inline_texts),
        cmocka_unit_test(test_reorder),
        cmocka_unit_test(test_extrapolation_never_free),
        cmocka_unit_test(test_edges_of_the_formats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
