/* coordinator/registry: registration, idempotent re-registration, fencing, liveness. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "coordinator/registry.h"

#define MS 1000000ull

static coord_worker_rec req(const char *name, const char *id, uint64_t epoch)
{
    coord_worker_rec r;
    memset(&r, 0, sizeof r);
    strcpy(r.name, name);
    strcpy(r.host, "node");
    strcpy(r.endpoint, "127.0.0.1:1");
    if (id)
        strcpy(r.id, id);
    r.epoch = epoch;
    return r;
}

static void test_register_and_reregister(void **state)
{
    (void)state;
    coord_registry *reg;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(coord_registry_new(&reg, NULL, &err), SC_OK);
    coord_worker *a, *b, *again;
    coord_worker_rec ra = req("a", NULL, 0), rb = req("b", NULL, 0);
    assert_int_equal(coord_registry_register(reg, &ra, 0, &a, &err), SC_OK);
    assert_int_equal(coord_registry_register(reg, &rb, 0, &b, &err), SC_OK);
    assert_string_equal(a->rec.id, "w-1");
    assert_string_equal(b->rec.id, "w-2");
    assert_int_equal(a->rec.epoch, 1);

    /* restarted worker presents its id: same id, next epoch */
    coord_worker_rec ra2 = req("a", "w-1", 1);
    assert_int_equal(coord_registry_register(reg, &ra2, 10 * MS, &again, &err), SC_OK);
    assert_string_equal(again->rec.id, "w-1");
    assert_int_equal(again->rec.epoch, 2);
    assert_int_equal(coord_registry_count(reg), 2);

    /* the old incarnation is fenced off */
    coord_worker *hb;
    assert_int_equal(coord_registry_heartbeat(reg, "w-1", 1, 20 * MS, &hb, &err),
                     SC_ERR_PERMISSION);
    assert_non_null(strstr(err.msg, "epoch 1"));
    sc_err_clear(&err);
    assert_int_equal(coord_registry_heartbeat(reg, "w-1", 2, 20 * MS, &hb, &err), SC_OK);

    /* a duplicate: another process claims the live name without the id */
    coord_worker_rec dup = req("a", NULL, 0);
    coord_worker *w;
    assert_int_equal(coord_registry_register(reg, &dup, 30 * MS, &w, &err), SC_ERR_EXISTS);
    assert_non_null(strstr(err.msg, "'a'"));
    sc_err_clear(&err);
    /* an impostor: claims b's id under another name */
    coord_worker_rec imp = req("c", "w-2", 1);
    assert_int_equal(coord_registry_register(reg, &imp, 30 * MS, &w, &err), SC_ERR_PERMISSION);
    sc_err_clear(&err);
    assert_int_equal(coord_registry_heartbeat(reg, "w-99", 1, 30 * MS, &hb, &err),
                     SC_ERR_NOT_FOUND);
    coord_worker_rec empty = req("", NULL, 0);
    sc_err_clear(&err);
    assert_int_equal(coord_registry_register(reg, &empty, 0, &w, &err), SC_ERR_INVALID);
    coord_registry_destroy(&reg);
    assert_null(reg);
}

static int changes_seen;
static void on_change(void *user, const coord_worker *w, coord_worker_state old)
{
    (void)user;
    (void)w;
    (void)old;
    changes_seen++;
}

static void test_liveness(void **state)
{
    (void)state;
    coord_registry *reg;
    sc_err err;
    sc_err_clear(&err);
    coord_registry_cfg cfg = {.heartbeat_interval_ms = 100, .suspect_after = 3, .dead_after = 5};
    assert_int_equal(coord_registry_new(&reg, &cfg, &err), SC_OK);
    coord_worker *w, *hb;
    coord_worker_rec r = req("a", NULL, 0);
    assert_int_equal(coord_registry_register(reg, &r, 0, &w, &err), SC_OK);

    changes_seen = 0;
    assert_int_equal(coord_registry_sweep(reg, 299 * MS, on_change, NULL), 0);
    assert_int_equal(w->state, COORD_WORKER_ALIVE);
    assert_int_equal(coord_registry_sweep(reg, 300 * MS, on_change, NULL), 1);
    assert_int_equal(w->state, COORD_WORKER_SUSPECT);
    /* a heartbeat brings a suspect worker back */
    assert_int_equal(coord_registry_heartbeat(reg, w->rec.id, 1, 350 * MS, &hb, &err), SC_OK);
    assert_int_equal(w->state, COORD_WORKER_ALIVE);
    assert_int_equal(coord_registry_sweep(reg, 849 * MS, on_change, NULL), 1); /* suspect */
    assert_int_equal(coord_registry_sweep(reg, 850 * MS, on_change, NULL), 1); /* dead */
    assert_int_equal(w->state, COORD_WORKER_DEAD);
    assert_int_equal(changes_seen, 3);
    /* dead stays dead; a heartbeat cannot revive it, re-registration can */
    assert_int_equal(coord_registry_heartbeat(reg, w->rec.id, 1, 900 * MS, &hb, &err),
                     SC_ERR_PRECONDITION);
    sc_err_clear(&err);
    coord_worker_rec back = req("a", NULL, 0); /* even without its id: the old one is dead */
    assert_int_equal(coord_registry_register(reg, &back, 950 * MS, &w, &err), SC_OK);
    assert_string_equal(w->rec.id, "w-1");
    assert_int_equal(w->rec.epoch, 2);
    assert_int_equal(w->state, COORD_WORKER_ALIVE);

    coord_registry_cfg bad = {.suspect_after = 5, .dead_after = 5};
    coord_registry *r2 = NULL;
    assert_int_equal(coord_registry_new(&r2, &bad, &err), SC_ERR_INVALID);
    coord_registry_destroy(&reg);
}

static void test_restore_after_restart(void **state)
{
    (void)state;
    coord_registry *reg;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(coord_registry_new(&reg, NULL, &err), SC_OK);
    coord_worker_rec old = req("gpu-a", "w-7", 4);
    assert_int_equal(coord_registry_restore(reg, &old, &err), SC_OK);
    coord_worker *w = coord_registry_find(reg, "w-7");
    assert_non_null(w);
    assert_int_equal(w->state, COORD_WORKER_DEAD);
    /* the worker reconnects and re-registers under its old id */
    coord_worker_rec back = req("gpu-a", "w-7", 4);
    assert_int_equal(coord_registry_register(reg, &back, 0, &w, &err), SC_OK);
    assert_string_equal(w->rec.id, "w-7");
    assert_int_equal(w->rec.epoch, 5);
    /* new workers never get a restored id */
    coord_worker_rec fresh = req("gpu-b", NULL, 0);
    assert_int_equal(coord_registry_register(reg, &fresh, 0, &w, &err), SC_OK);
    assert_string_equal(w->rec.id, "w-8");
    coord_registry_destroy(&reg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_register_and_reregister),
        cmocka_unit_test(test_liveness),
        cmocka_unit_test(test_restore_after_restart),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
