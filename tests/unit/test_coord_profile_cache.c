/* coordinator/profile_cache: a profile is reused for the same worker, registration, hardware and
 * request only, replaced by a later one, and the least recently used goes when full. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/profile_cache.h"

static const unsigned char hw_a[] = {1, 2, 3}, hw_b[] = {1, 2, 4};

static coord_profile_key key(const char *worker, uint64_t epoch, const unsigned char *hw,
                             const char *request)
{
    return (coord_profile_key){worker, epoch, hw, 3, request};
}

/* The profile under k, "" when none (the copy freed here). */
static const char *get(coord_profile_cache *pc, coord_profile_key k, char *from)
{
    static char buf[128];
    char *p = coord_profile_cache_get(pc, &k, from, 64);
    snprintf(buf, sizeof buf, "%s", p != NULL ? p : "");
    free(p);
    return buf;
}

static void test_same_key_only(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    coord_profile_cache *pc = NULL;
    assert_int_equal(coord_profile_cache_new(&pc, &err), SC_OK);
    char from[64] = "";
    assert_string_equal(get(pc, key("w-1", 1, hw_a, "gpt"), from), "");
    coord_profile_cache_put(pc, &(coord_profile_key){"w-1", 1, hw_a, 3, "gpt"}, "job-1", "P1");
    assert_string_equal(get(pc, key("w-1", 1, hw_a, "gpt"), from), "P1");
    assert_string_equal(from, "job-1");
    /* another worker, registration, device or request misses */
    assert_string_equal(get(pc, key("w-2", 1, hw_a, "gpt"), NULL), "");
    assert_string_equal(get(pc, key("w-1", 2, hw_a, "gpt"), NULL), "");
    assert_string_equal(get(pc, key("w-1", 1, hw_b, "gpt"), NULL), "");
    assert_string_equal(get(pc, key("w-1", 1, hw_a, "gpt bf16"), NULL), "");
    /* a later profile of the same key replaces it */
    coord_profile_cache_put(pc, &(coord_profile_key){"w-1", 1, hw_a, 3, "gpt"}, "job-2", "P2");
    assert_string_equal(get(pc, key("w-1", 1, hw_a, "gpt"), from), "P2");
    assert_string_equal(from, "job-2");
    coord_profile_cache_destroy(&pc);
    assert_null(pc);
    coord_profile_cache_destroy(&pc); /* accepts NULL */
}

static void test_full_forgets_least_recent(void **state)
{
    (void)state;
    coord_profile_cache *pc = NULL;
    assert_int_equal(coord_profile_cache_new(&pc, NULL), SC_OK);
    char id[32];
    for (int i = 0; i < COORD_PROFILE_CACHE_MAX; i++) {
        snprintf(id, sizeof id, "w-%d", i);
        coord_profile_cache_put(pc, &(coord_profile_key){id, 1, hw_a, 3, "gpt"}, "job-1", id);
    }
    assert_string_equal(get(pc, key("w-0", 1, hw_a, "gpt"), NULL), "w-0"); /* w-1 is oldest now */
    coord_profile_cache_put(pc, &(coord_profile_key){"w-new", 1, hw_a, 3, "gpt"}, "job-2", "N");
    assert_string_equal(get(pc, key("w-1", 1, hw_a, "gpt"), NULL), "");
    assert_string_equal(get(pc, key("w-0", 1, hw_a, "gpt"), NULL), "w-0");
    assert_string_equal(get(pc, key("w-2", 1, hw_a, "gpt"), NULL), "w-2");
    assert_string_equal(get(pc, key("w-new", 1, hw_a, "gpt"), NULL), "N");
    coord_profile_cache_destroy(&pc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_key_only),
        cmocka_unit_test(test_full_forgets_least_recent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
