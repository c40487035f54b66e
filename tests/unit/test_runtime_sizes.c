/* worker/runtime/runner with micro-batches of unequal sizes: sizes that differ per micro-batch
 * (gpipe, 1f1b) and sliced warm-ups, a cut of its own on every stage (activations and gradients
 * re-sliced at the stage boundaries) and backward cuts that differ from the forward ones
 * (UMPIPE): always the single-stage result with gradient accumulation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include <stdlib.h>

#include "tests/unit/runtime_harness.h"

static void test_equivalence_unequal_sliced(void **state)
{
    (void)state;
    static const int sizes_a[] = {3, 1, 2, 2}, sizes_b[] = {1, 3, 2, 2}, sizes_c[] = {2, 1, 1};
    const run_spec specs[] = {
        {GPT_JSON, "1f1b", 2, 8, 4, 3, "adamw", "zmq", NULL, NULL, sizes_a, 0},
        {GPT_JSON, "gpipe", 4, 8, 4, 3, "sgd", "local", NULL, NULL, sizes_b, 0},
        {GPT_JSON, "sliced", 4, 8, 4, 3, "adamw", "zmq", NULL, NULL, NULL, 3},
        {GPT_JSON, "sliced", 2, 8, 2, 3, "sgd", "local", NULL, NULL, NULL, 1},
        {VGG_JSON, "sliced", 4, 4, 2, 2, "sgd", "zmq", NULL, NULL, NULL, 2},
        {MLP_JSON, "sliced", 4, 4, 3, 3, "adamw", "local", NULL, NULL, sizes_c, 1},
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
        check_equivalence(&specs[i]);
}

/* Each stage cuts the batch its own way (fill-drain): still the single-stage result. */
static void test_equivalence_per_stage_sizes(void **state)
{
    (void)state;
    static const int a[] = {3, 5}, b[] = {2, 2, 4}, c[] = {8}, d[] = {1, 3, 4}, e[] = {4, 4},
                     f[] = {2, 3, 3}, g[] = {1, 1, 1, 5};
    const per_stage_sizes three = {.sizes = {a, b, c}, .counts = {2, 3, 1}};
    const per_stage_sizes three_b = {.sizes = {d, e, f}, .counts = {3, 2, 3}};
    const per_stage_sizes two = {.sizes = {c, g}, .counts = {1, 4}};
    const per_stage_sizes two_b = {.sizes = {b, a}, .counts = {3, 2}};
    const struct {
        run_spec rs;
        const per_stage_sizes *ps;
    } cases[] = {
        {{GPT_JSON, "gpipe", 3, 8, 2, 3, "adamw", "zmq", NULL, NULL, a, 0}, &three},
        {{GPT_JSON, "unequal", 2, 8, 3, 3, "sgd", "local", NULL, NULL, b, 0}, &two_b},
        {{GPT_JSON, "unequal", 3, 8, 3, 2, "adamw", "local", NULL, NULL, d, 0}, &three_b},
        {{MLP_JSON, "unequal", 3, 8, 2, 4, "adamw", "local", NULL, NULL, a, 0}, &three},
        {{MLP_JSON, "gpipe", 3, 8, 3, 3, "sgd", "zmq", NULL, NULL, d, 0}, &three_b},
        {{MLP_JSON, "unequal", 2, 8, 1, 4, "adamw", "zmq", NULL, NULL, c, 0}, &two},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_opts_set(&(run_opts){.per_stage = cases[i].ps});
        check_equivalence(&cases[i].rs);
        run_opts_set(NULL);
    }
}

/* UMPIPE's backward cut: every stage runs its backwards over its own sizes, which differ from its
 * forward sizes and from the neighbours' (entries that span several forwards, that split one,
 * that coincide with one): still the single-stage result with gradient accumulation. */
static void test_equivalence_backward_sizes(void **state)
{
    (void)state;
    static const int f35[] = {3, 5}, f44[] = {4, 4}, f8[] = {8}, f224[] = {2, 2, 4},
                     f1115[] = {1, 1, 1, 5}, f26[] = {2, 6}, f125[] = {1, 2, 5},
                     f2222[] = {2, 2, 2, 2}, f1223[] = {1, 2, 2, 3}, f13[] = {1, 3}, f22[] = {2, 2},
                     f4[] = {4};
    static const int b224[] = {2, 2, 4}, b8[] = {8}, b134[] = {1, 3, 4}, b44[] = {4, 4},
                     b35[] = {3, 5}, b53[] = {5, 3}, b2222[] = {2, 2, 2, 2}, b314[] = {3, 1, 4},
                     b17[] = {1, 7}, b116[] = {1, 1, 6}, b26[] = {2, 6}, b323[] = {3, 2, 3},
                     b11114[] = {1, 1, 1, 1, 4}, b22[] = {2, 2}, b4[] = {4}, b13[] = {1, 3};
    /* GPT, 2 stages: stage 0's [0, 2) splits its first forward, [2, 4) spans both, [4, 8) is the
     * end of the second; stage 1 runs one backward over its two forwards */
    const per_stage_sizes gpt2 = {{f35, f44}, {2, 2}, {b224, b8}, {3, 1}};
    /* GPT, 3 stages: one forward split in three, two forwards joined, a mixed last stage */
    const per_stage_sizes gpt3 = {{f8, f224, f1115}, {1, 3, 4}, {b134, b44, b35}, {3, 2, 2}};
    const per_stage_sizes gpt4 = {
        {f26, f8, f125, f44}, {2, 1, 3, 2}, {b53, b2222, b314, b17}, {2, 4, 3, 2}};
    /* only the middle stage has its own backward cut; its neighbours run theirs as forward */
    const per_stage_sizes gpt3_mid = {{f35, f224, f8}, {2, 3, 1}, {NULL, b17, NULL}, {0, 2, 0}};
    const per_stage_sizes mlp2 = {{f35, f2222}, {2, 4}, {b116, b35}, {3, 2}};
    const per_stage_sizes mlp4 = {
        {f8, f44, f1223, f35}, {1, 2, 4, 2}, {b26, b8, b323, b11114}, {2, 1, 3, 5}};
    const per_stage_sizes mlp1 = {{f35}, {2}, {b26}, {2}};
    const per_stage_sizes vgg2 = {{f13, f22}, {2, 2}, {b22, b4}, {2, 1}};
    const per_stage_sizes vgg2_b = {{f4, f13}, {1, 2}, {b13, b22}, {2, 2}};
    const struct {
        run_spec rs;
        const per_stage_sizes *ps;
    } cases[] = {
        {{GPT_JSON, "unequal", 2, 8, 2, 3, "adamw", "local", NULL, NULL, f35, 0}, &gpt2},
        {{GPT_JSON, "gpipe", 3, 8, 1, 3, "sgd", "zmq", NULL, NULL, f8, 0}, &gpt3},
        {{GPT_JSON, "unequal", 4, 8, 2, 2, "adamw", "zmq", NULL, NULL, f26, 0}, &gpt4},
        {{GPT_JSON, "unequal", 3, 8, 2, 3, "adamw", "local", NULL, NULL, f35, 0}, &gpt3_mid},
        {{MLP_JSON, "unequal", 2, 8, 2, 4, "sgd", "local", NULL, NULL, f35, 0}, &mlp2},
        {{MLP_JSON, "gpipe", 4, 8, 1, 4, "adamw", "zmq", NULL, NULL, f8, 0}, &mlp4},
        {{MLP_JSON, "unequal", 1, 8, 2, 3, "adamw", "local", NULL, NULL, f35, 0}, &mlp1},
        {{VGG_JSON, "unequal", 2, 4, 2, 2, "sgd", "local", NULL, NULL, f13, 0}, &vgg2},
        {{VGG_JSON, "unequal", 2, 4, 1, 2, "adamw", "zmq", NULL, NULL, f4, 0}, &vgg2_b},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_opts_set(&(run_opts){.per_stage = cases[i].ps});
        check_equivalence(&cases[i].rs);
        run_opts_set(NULL);
    }
}

int main(void)
{
    /* clang-format off */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equivalence_unequal_sliced),
        cmocka_unit_test(test_equivalence_per_stage_sizes),
        cmocka_unit_test(test_equivalence_backward_sizes),
    };
    /* clang-format on */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
