/* coordinator/jobs_dispatch: which chosen workers are profiled at the same time (one group per
 * server, or one per worker where each worker of a server drives a GPU of its own). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "coordinator/jobs_internal.h"

#define MAX_W 6

static Stagecraft__HardwareReport hw[MAX_W];
static Stagecraft__Device dev[MAX_W], *devp[MAX_W];
static coord_chosen_worker ws[MAX_W];

/* Worker i on `host`, driving `kind` ("cpu" or "cuda") at PCI bus `bus`. */
static void worker(int i, const char *host, const char *kind, const char *bus)
{
    stagecraft__hardware_report__init(&hw[i]);
    stagecraft__device__init(&dev[i]);
    dev[i].kind = (char *)kind;
    dev[i].pci_bus_id = (char *)bus;
    devp[i] = &dev[i];
    hw[i].hostname = (char *)host;
    hw[i].devices = &devp[i];
    hw[i].n_devices = 1;
    memset(&ws[i], 0, sizeof ws[i]);
    ws[i].hw = &hw[i];
}

static void test_servers_apart_shared_cores_together(void **state)
{
    (void)state;
    int g[MAX_W];
    worker(0, "a", "cpu", "");
    worker(1, "a", "cpu", "");
    worker(2, "b", "cpu", "");
    assert_int_equal(coord_jobs_profile_groups(ws, 3, g), 2);
    assert_int_equal(g[0], g[1]); /* one server's processors: one at a time */
    assert_int_not_equal(g[0], g[2]);
}

static void test_gpus_of_their_own(void **state)
{
    (void)state;
    int g[MAX_W];
    worker(0, "a", "cuda", "0000:01:00.0");
    worker(1, "a", "cuda", "0000:02:00.0");
    worker(2, "b", "cuda", "0000:01:00.0");
    worker(3, "b", "cuda", "0000:01:00.0"); /* two workers on one GPU of b */
    assert_int_equal(coord_jobs_profile_groups(ws, 4, g), 3);
    assert_int_not_equal(g[0], g[1]);
    assert_int_equal(g[2], g[3]);
    assert_int_not_equal(g[0], g[2]);
    assert_int_not_equal(g[1], g[2]);
    /* a CPU worker beside a server's GPU workers shares their processors: all one group */
    worker(0, "a", "cuda", "0000:01:00.0");
    worker(1, "a", "cpu", "");
    worker(2, "a", "cuda", "0000:02:00.0");
    assert_int_equal(coord_jobs_profile_groups(ws, 3, g), 1);
    assert_true(g[0] == 0 && g[1] == 0 && g[2] == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_servers_apart_shared_cores_together),
        cmocka_unit_test(test_gpus_of_their_own),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
