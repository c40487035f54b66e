/* coordinator/speeds: the links of a job's speed model: clock offsets from control messages,
 * transits corrected by them, the smoothed speed per link, its reference and the factor a
 * re-plan puts on a worker's probed link; the copies' all-reduce speed per worker. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>

#include "coordinator/speeds.h"

static bool near(double a, double b, double rel)
{
    return fabs(a - b) <= rel * fabs(b);
}

/* A job "j" with workers a and b, probed links 1e8 and 2e8 bytes/s. */
static coord_speeds *job(void)
{
    coord_speeds *all = NULL;
    const char *ids[2] = {"a", "b"}, *profiles[2] = {"{\"blocks\": []}", "{\"blocks\": []}"};
    const double links[2] = {1e8, 2e8};
    coord_speeds_keep(&all, "j", ids, profiles, links, 2);
    return all;
}

static void test_transit(void **state)
{
    (void)state;
    coord_speeds *all = job();
    double t;
    /* no clock estimate yet: no transit */
    assert_false(coord_speeds_transit(all, "j", "a", "b", 0.5, &t));
    /* a's clock is 5 s ahead of the coordinator's, b's 3 s behind; their control messages take
     * 1-4 ms to arrive (1 ms at best for both) */
    const uint64_t base = 100000000000ull; /* the coordinator's clock, ns */
    const double delays_ms[] = {4, 1, 2.5, 3};
    for (int i = 0; i < 4; i++) {
        uint64_t at = base + (uint64_t)i * 1000000000ull;
        uint64_t got = at + (uint64_t)(delays_ms[i] * 1e6);
        coord_speeds_clock(all, "j", "a", "boot-a", at + 5000000000ull, got);
        coord_speeds_clock(all, "j", "b", "boot-b", at - 3000000000ull, got);
    }
    /* a message a -> b took 20 ms: b measured its arrival minus a's stamp = 0.02 - 8 s */
    assert_true(coord_speeds_transit(all, "j", "a", "b", 0.02 - 8.0, &t));
    assert_true(fabs(t - 0.02) < 1e-6); /* both estimates are 1 ms short: the error cancels */
    assert_true(coord_speeds_transit(all, "j", "b", "a", 0.02 + 8.0, &t));
    assert_true(fabs(t - 0.02) < 1e-6);
    /* one kernel (same clock id): the delay is the transit as it stands */
    coord_speeds_clock(all, "j", "b", "boot-a", base + 9000000000ull, base + 5000000000ull);
    assert_true(coord_speeds_transit(all, "j", "a", "b", 0.013, &t));
    assert_true(t == 0.013);
    coord_speeds_free(&all);
}

static void test_link_smoothing(void **state)
{
    (void)state;
    coord_speeds *all = job();
    coord_link_speed v[4];
    /* 7 samples at 1e6 bytes/s: no reference yet, so nothing is shown and nothing changes */
    for (int i = 0; i < 7; i++)
        coord_speeds_link_sample(all, "j", "a", "b", 1e4, 0.01, 8, false);
    assert_int_equal(coord_speeds_links(all, "j", v, 4), 0);
    assert_true(coord_speeds_link_factor(all, "j", "a", true) == 1);
    coord_speeds_link_sample(all, "j", "a", "b", 1e4, 0.01, 8, false);
    assert_int_equal(coord_speeds_links(all, "j", v, 4), 1);
    assert_string_equal(v[0].from, "a");
    assert_string_equal(v[0].to, "b");
    assert_true(near(v[0].reference, 1e6, 1e-9));
    assert_true(near(v[0].expected, 1e6, 1e-9));
    assert_true(near(v[0].measured, 1e6, 1e-9));
    assert_int_equal(v[0].messages, 8);
    /* no sample of a transit <= 0 (clocks estimated too far apart) */
    coord_speeds_link_sample(all, "j", "a", "b", 1e4, -0.001, 8, false);
    coord_speeds_link_sample(all, "j", "a", "b", 1e4, 0, 8, false);
    assert_int_equal(coord_speeds_links(all, "j", v, 4), 1);
    assert_int_equal(v[0].samples, 8);

    /* one late message (10x) moves nothing: the median of the last 5 samples is unchanged */
    coord_speeds_link_sample(all, "j", "a", "b", 1e4, 0.1, 8, false);
    coord_speeds_links(all, "j", v, 4);
    assert_true(near(v[0].measured, 1e6, 1e-9));
    for (int i = 0; i < 5; i++) /* out of the last five again */
        coord_speeds_link_sample(all, "j", "a", "b", 1e4, 0.01, 8, false);
    /* the link slows 10x: the median follows from the third slow sample of the last five, and
     * seconds per byte are smoothed with weight 0.2, so after k slow samples in a row (k >= 3)
     * the figure is 1 / (1e-5 - 9e-6 * 0.8^(k - 2)) */
    for (int k = 1; k <= 22; k++) {
        coord_speeds_link_sample(all, "j", "a", "b", 1e4, 0.1, 8, false);
        coord_speeds_links(all, "j", v, 4);
        double want = k < 3 ? 1e6 : 1 / (1e-5 - 9e-6 * pow(0.8, k - 2));
        assert_true(near(v[0].measured, want, 1e-9));
    }
    assert_true(near(v[0].measured, 1e5, 0.02));
    assert_true(near(v[0].expected, 1e6, 1e-9)); /* the plan still expects the reference */

    /* the factor on a's probed link: measured now vs its reference; adopted only by a re-plan */
    double f = coord_speeds_link_factor(all, "j", "a", true);
    assert_true(near(f, v[0].measured / 1e6, 1e-9));
    assert_true(coord_speeds_link_factor(all, "j", "a", false) == 1);
    assert_true(coord_speeds_link_factor(all, "j", "b", true) == 1); /* b sends nothing here */
    double link = 0;
    free(coord_speeds_profile(all, "j", "a", &link));
    assert_true(near(link, 1e8, 1e-12));
    assert_false(coord_speeds_link_suspect(all, "j", "a", 0.4));
    coord_speeds_links_adopt(all, "j", 0.4);
    coord_speeds_links(all, "j", v, 4);
    assert_true(near(v[0].expected, v[0].measured, 1e-12));
    assert_true(near(coord_speeds_link_factor(all, "j", "a", false), f, 1e-12));
    free(coord_speeds_profile(all, "j", "a", &link));
    assert_true(near(link, 1e8 * f, 1e-9)); /* what the driver's re-plan takes */
    free(coord_speeds_profile(all, "j", "b", &link));
    assert_true(near(link, 2e8, 1e-12));

    /* adopted 10x below its reference: both ends are suspects (either uplink may be slow) */
    assert_true(coord_speeds_link_suspect(all, "j", "a", 0.4));
    assert_true(coord_speeds_link_suspect(all, "j", "b", 0.4));
    /* b's probe again: the link restarts, and a is cleared with it */
    coord_speeds_set_link(all, "j", "b", 2e8);
    assert_int_equal(coord_speeds_links(all, "j", v, 4), 0);
    assert_false(coord_speeds_link_suspect(all, "j", "a", 0.4));
    assert_true(coord_speeds_link_factor(all, "j", "a", false) == 1);

    /* a fresh profile of a with a slower probe: its link is that probe, and it stays a suspect
     * (probed again while it trains) until a probe is back near its first */
    const char *ids[1] = {"a"}, *profiles[1] = {"{\"blocks\": []}"};
    const double links[1] = {5e7};
    coord_speeds_keep(&all, "j", ids, profiles, links, 1);
    free(coord_speeds_profile(all, "j", "a", &link));
    assert_true(near(link, 5e7, 1e-12));
    assert_true(coord_speeds_link_suspect(all, "j", "a", 0.4));
    coord_speeds_set_link(all, "j", "a", 0.9e8);
    assert_false(coord_speeds_link_suspect(all, "j", "a", 0.4));

    /* adopting measured figures within 40% of their reference adopts nothing */
    for (int i = 0; i < 8; i++)
        coord_speeds_link_sample(all, "j", "a", "b", 1e4, 0.01, 8, false);
    for (int i = 0; i < 20; i++)
        coord_speeds_link_sample(all, "j", "a", "b", 1e4, 0.013, 8, false);
    coord_speeds_links_adopt(all, "j", 0.4);
    coord_speeds_links(all, "j", v, 4);
    assert_true(v[0].measured < 0.8e6 && v[0].measured > 1e6 / 1.4);
    assert_true(near(v[0].expected, 1e6, 1e-9));
    coord_speeds_free(&all);
}

/* Between capped workers a transit holds any throttled wait of either end: the least of the last
 * five samples counts, so a fast link whose messages mostly wait (up to 50 ms on a 2.6 ms
 * transfer) is seen at its speed, and a slowdown shows once five samples in a row are slow. */
static void test_link_capped(void **state)
{
    (void)state;
    coord_speeds *all = job();
    coord_link_speed v[4];
    const double waits[5] = {0, 0.047, 0.021, 0.05, 0.012}; /* throttled spells, one free */
    for (int i = 0; i <= 40; i++)                           /* the last one free */
        coord_speeds_link_sample(all, "j", "a", "b", 262144, 0.0026 + waits[i % 5], 8, true);
    assert_int_equal(coord_speeds_links(all, "j", v, 4), 1);
    double fast = 262144 / 0.0026;
    assert_true(near(v[0].measured, fast, 1e-9));
    /* the same samples as a link of uncapped workers: the median of the five is a throttled one */
    for (int i = 0; i < 40; i++)
        coord_speeds_link_sample(all, "j", "c", "d", 262144, 0.0026 + waits[i % 5], 8, false);
    coord_speeds_links(all, "j", v, 4);
    assert_string_equal(v[1].from, "c");
    assert_true(v[1].measured < 0.2 * fast);
    /* cut to 5e5 bytes/s (0.524 s a message, waits on top): four slow samples move nothing, the
     * fifth does */
    for (int k = 1; k <= 5; k++) {
        coord_speeds_link_sample(all, "j", "a", "b", 262144, 0.524288 + waits[k % 5], 8, true);
        coord_speeds_links(all, "j", v, 4);
        if (k < 5)
            assert_true(near(v[0].measured, fast, 1e-9));
    }
    assert_true(v[0].measured < 0.5 * fast);
    for (int i = 0; i < 40; i++)
        coord_speeds_link_sample(all, "j", "a", "b", 262144, 0.524288 + waits[i % 5], 8, true);
    coord_speeds_links(all, "j", v, 4);
    assert_true(near(v[0].measured, 5e5, 1e-3));
    coord_speeds_free(&all);
}

/* The copies' all-reduce: a figure per worker in the planner's measure (4 (r-1) W / r bytes)
 * once five samples came, the median of the last five into the average, so one late all-reduce
 * moves nothing; a worker the job has no profile of keeps nothing. */
static void test_reduce_speed(void **state)
{
    (void)state;
    coord_speeds *all = job();
    const double W = 6.64e6, t = 0.0167, bw = 4.0 * W / 2 / t;
    for (int i = 0; i < 4; i++) {
        coord_speeds_reduce_sample(all, "j", "a", 2, W, t);
        assert_true(coord_speeds_reduce_bw(all, "j", "a") == 0);
    }
    coord_speeds_reduce_sample(all, "j", "a", 2, W, t);
    assert_true(near(coord_speeds_reduce_bw(all, "j", "a"), bw, 1e-12));
    assert_true(near(coord_speeds_reduce_s(all, "j", "a", 2, W), t, 1e-12));
    /* three copies move 4 (2/3) W in the planner's measure: at the same speed, 4/3 the time */
    assert_true(near(coord_speeds_reduce_s(all, "j", "a", 3, W), t * 4 / 3, 1e-12));
    assert_true(coord_speeds_reduce_s(all, "j", "a", 1, W) == 0);
    /* one all-reduce 60x slower (the host busy): the median of five is still t */
    coord_speeds_reduce_sample(all, "j", "a", 2, W, 1.0);
    assert_true(near(coord_speeds_reduce_bw(all, "j", "a"), bw, 1e-12));
    /* slower for good: it follows */
    for (int i = 0; i < 30; i++)
        coord_speeds_reduce_sample(all, "j", "a", 2, W, 2 * t);
    assert_true(near(coord_speeds_reduce_bw(all, "j", "a"), bw / 2, 1e-3));
    /* b measured nothing; an unknown worker or job keeps nothing; nonsense is no sample */
    assert_true(coord_speeds_reduce_bw(all, "j", "b") == 0);
    for (int i = 0; i < 5; i++) {
        coord_speeds_reduce_sample(all, "j", "z", 2, W, t);
        coord_speeds_reduce_sample(all, "k", "a", 2, W, t);
        coord_speeds_reduce_sample(all, "j", "b", 2, W, 0);
        coord_speeds_reduce_sample(all, "j", "b", 1, W, t);
    }
    assert_true(coord_speeds_reduce_bw(all, "j", "z") == 0);
    assert_true(coord_speeds_reduce_bw(all, "k", "a") == 0);
    assert_true(coord_speeds_reduce_bw(all, "j", "b") == 0);
    coord_speeds_free(&all);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_transit),
        cmocka_unit_test(test_link_smoothing),
        cmocka_unit_test(test_link_capped),
        cmocka_unit_test(test_reduce_speed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
