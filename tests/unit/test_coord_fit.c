/* coordinator/jobs_fit: a model whose training state cannot fit the chosen workers is refused
 * before profiling, naming both figures; one that may fit passes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include <string.h>

#include "coordinator/jobs_internal.h"

/* A chosen worker with one device of `mem` bytes. */
typedef struct {
    Stagecraft__HardwareReport hw;
    Stagecraft__Device dev, *devs[1];
} fake_worker;

static void fake(fake_worker *f, coord_chosen_worker *cw, const char *name, uint64_t mem)
{
    stagecraft__hardware_report__init(&f->hw);
    stagecraft__device__init(&f->dev);
    f->dev.memory_bytes = mem;
    f->devs[0] = &f->dev;
    f->hw.devices = f->devs;
    f->hw.n_devices = 1;
    memset(cw, 0, sizeof *cw);
    strcpy(cw->name, name);
    cw->hw = &f->hw;
}

static void test_fit(void **state)
{
    (void)state;
    coord_jobspec spec;
    memset(&spec, 0, sizeof spec);
    strcpy(spec.optimizer, "adamw");
    spec.param_count = 1000000000; /* 1e9 parameters: 16 GB with adamw */
    spec.max_block_params = 100000000;
    assert_int_equal(coord_jobs_train_bytes_per_param(&spec), 16);
    fake_worker f[2];
    coord_chosen_worker ws[2];
    fake(&f[0], &ws[0], "a", 10000000000ull); /* 10 GB */
    fake(&f[1], &ws[1], "b", 10000000000ull);
    sc_err err;
    sc_err_clear(&err);
    /* 16 GB on one 10 GB worker: refused, both figures named */
    assert_int_equal(coord_jobs_check_fit(&spec, ws, 1, &err), SC_ERR_TOO_LARGE);
    assert_non_null(strstr(err.msg, "the model does not fit on the 1 worker(s) chosen"));
    assert_non_null(strstr(err.msg, "need 16.0 GB to train with adamw"));
    assert_non_null(strstr(err.msg, "have 10.0 GB together"));
    /* on two: it may fit */
    sc_err_clear(&err);
    assert_int_equal(coord_jobs_check_fit(&spec, ws, 2, &err), SC_OK);
    /* a block of 1e9 parameters never fits a 10 GB worker, however many there are */
    spec.max_block_params = 1000000000;
    spec.param_count = 1000000000;
    fake_worker g[2];
    coord_chosen_worker more[2];
    fake(&g[0], &more[0], "c", 10000000000ull);
    fake(&g[1], &more[1], "d", 10000000000ull);
    sc_err_clear(&err);
    assert_int_equal(coord_jobs_check_fit(&spec, more, 2, &err), SC_ERR_TOO_LARGE);
    assert_non_null(strstr(err.msg, "does not fit on a worker: its largest block"));
    /* sgd without momentum keeps no state: 8 bytes a parameter */
    strcpy(spec.optimizer, "sgd");
    spec.momentum = 0;
    assert_int_equal(coord_jobs_train_bytes_per_param(&spec), 8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_fit)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
