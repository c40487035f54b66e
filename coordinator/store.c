/*
 * SQLite job store (see store.h). The schema is created on open; `meta.schema_version` guards
 * against opening a state folder written by an incompatible release. Job ids come from the
 * table's rowid, so they are never reused, even after a restart.
 */
#include "coordinator/store.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/sc_log.h"
#include "common/sc_util.h"
#include "coordinator/store_reserve.h"

#define SCHEMA_VERSION 1
#define LOG "store"

struct coord_store {
    sqlite3 *db;
    char path[4096];
    char dir[4096];
    coord_reserve reserve;
    bool last_full;     /* the last failure was for want of space */
    bool full;          /* the disk filled and the reserve is not made again yet */
    char full_msg[256]; /* SQLite's words for the last failure for want of space */
};

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS jobs("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE, name TEXT NOT NULL,"
    "  state TEXT NOT NULL, reason TEXT NOT NULL, spec_json TEXT NOT NULL, plan_json TEXT,"
    "  workers TEXT, step INTEGER NOT NULL DEFAULT 0, steps INTEGER NOT NULL DEFAULT 0,"
    "  last_checkpoint_step INTEGER NOT NULL DEFAULT 0,"
    "  created_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL,"
    "  checkpoint_error TEXT NOT NULL DEFAULT '');"
    "CREATE TABLE IF NOT EXISTS transitions("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, from_state TEXT NOT NULL,"
    "  to_state TEXT NOT NULL, reason TEXT NOT NULL, at_ms INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS transitions_job ON transitions(job_id, seq);"
    "CREATE TABLE IF NOT EXISTS workers("
    "  id TEXT PRIMARY KEY, name TEXT NOT NULL, host TEXT NOT NULL, endpoint TEXT NOT NULL,"
    "  epoch INTEGER NOT NULL, hardware BLOB, registered_ms INTEGER NOT NULL);"
    /* added after the first release: older releases open a database with it and ignore it */
    "CREATE TABLE IF NOT EXISTS traces("
    "  job_id TEXT PRIMARY KEY, trace_json TEXT NOT NULL, meta_json TEXT NOT NULL,"
    "  kept_ms INTEGER NOT NULL);"
    /* added later still, as traces were: each job's training series (history.h); a loss or a
     * throughput not measured is NULL */
    "CREATE TABLE IF NOT EXISTS history("
    "  job_id TEXT NOT NULL, step INTEGER NOT NULL, loss REAL, samples_per_s REAL,"
    "  iteration_s REAL NOT NULL, at_ms INTEGER NOT NULL, PRIMARY KEY(job_id, step));";

static int64_t now_unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Whether the database's last error was for want of space (SQLITE_FULL, or a write, a
 * journal or the shared-memory file refused with ENOSPC). */
static bool no_space(coord_store *s)
{
    return sqlite3_errcode(s->db) == SQLITE_FULL || sqlite3_system_errno(s->db) == ENOSPC;
}

static sc_status full_error(coord_store *s, sc_err *err, const char *what)
{
    sc_strlcpy(s->full_msg, sqlite3_errmsg(s->db), sizeof s->full_msg);
    return SC_ERRF(err, SC_ERR_TOO_LARGE,
                   "the coordinator's state folder %s is full: %s: %s; free space on its disk",
                   s->dir, what, sqlite3_errmsg(s->db));
}

static sc_status db_fail(coord_store *s, sc_err *err, const char *what)
{
    s->last_full = no_space(s);
    if (s->last_full)
        return full_error(s, err, what);
    return SC_ERRF(err, SC_ERR_IO, "state database %s: %s: %s", s->path, what,
                   sqlite3_errmsg(s->db));
}

static sc_status exec(coord_store *s, const char *sql, sc_err *err)
{
    char *msg = NULL;
    if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        s->last_full = no_space(s);
        sc_status rc = s->last_full ? full_error(s, err, sql)
                                    : SC_ERRF(err, SC_ERR_IO, "state database %s: %s", s->path,
                                              msg ? msg : "error");
        sqlite3_free(msg);
        return rc;
    }
    return SC_OK;
}

/* ---- a full disk ------------------------------------------------------------------------- */

/* Ends a transaction a failed write left open (a failed COMMIT may leave it so): the next
 * BEGIN would fail for ever otherwise. */
static void settle(coord_store *s)
{
    if (!sqlite3_get_autocommit(s->db))
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

/* Notes that the disk is full (the last failure was for want of space), saying so once. */
static void mark_full(coord_store *s)
{
    if (!s->full)
        SC_LOG_ERROR(LOG,
                     "the coordinator's state folder %s is full (%s): new jobs are refused until "
                     "there is %zu MiB free there, and no training series or traces are kept "
                     "meanwhile; free space on its disk",
                     s->dir, s->full_msg, 2 * s->reserve.bytes >> 20);
    s->full = true;
}

/* Whether the disk has room again (the reserve is made again), saying so once; tries at most
 * once a second unless `now`. */
static bool room_again(coord_store *s, bool now)
{
    if (!s->full)
        return true;
    if (!coord_reserve_refill(&s->reserve, now))
        return false;
    s->full = false;
    SC_LOG_WARN(LOG, "the coordinator's state folder %s has room again: new jobs are accepted",
                s->dir);
    return true;
}

/* After a failed write: when it failed for want of space, frees the reserve; true when it did
 * (the write may run once more). */
static bool spend_reserve(coord_store *s)
{
    settle(s);
    if (!s->last_full)
        return false;
    mark_full(s);
    if (!coord_reserve_spend(&s->reserve))
        return false;
    SC_LOG_WARN(LOG, "state folder %s: freed its %zu MiB reserve for the jobs already accepted",
                s->dir, s->reserve.bytes >> 20);
    return true;
}

/* After a write: closes what it left open; once the disk has room again, makes the reserve
 * again. */
static sc_status after_write(coord_store *s, sc_status rc)
{
    settle(s);
    if (rc == SC_OK)
        room_again(s, false);
    return rc;
}

/* Returns the result of `call` (an sc_status expression), a write for what the coordinator
 * already accepted: one that failed for want of space runs once more in the reserve's room. */
#define WRITE(s, call)                                                                             \
    do {                                                                                           \
        (s)->last_full = false;                                                                    \
        sc_status rc_ = (call);                                                                    \
        if (rc_ != SC_OK && spend_reserve(s))                                                      \
            rc_ = (call);                                                                          \
        return after_write((s), rc_);                                                              \
    } while (0)

static sc_status prepare(coord_store *s, const char *sql, sqlite3_stmt **st, sc_err *err)
{
    if (sqlite3_prepare_v2(s->db, sql, -1, st, NULL) != SQLITE_OK)
        return db_fail(s, err, "prepare");
    return SC_OK;
}

/* Columns added to a table after its first release, in order: a database made by an older
 * release gets them on open (the same schema version: older releases name the columns they
 * read, so they still open it). */
static sc_status add_new_columns(coord_store *s, sc_err *err)
{
    sqlite3_stmt *st;
    SC_CHECK(prepare(s, "SELECT 1 FROM pragma_table_info('jobs') WHERE name='checkpoint_error'",
                     &st, err));
    bool has = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    if (has)
        return SC_OK;
    return exec(s, "ALTER TABLE jobs ADD COLUMN checkpoint_error TEXT NOT NULL DEFAULT ''", err);
}

static sc_status check_schema_version(coord_store *s, sc_err *err)
{
    sqlite3_stmt *st;
    SC_CHECK(prepare(s, "SELECT value FROM meta WHERE key='schema_version'", &st, err));
    sc_status rc = SC_OK;
    if (sqlite3_step(st) == SQLITE_ROW) {
        int v = atoi((const char *)sqlite3_column_text(st, 0));
        if (v != SCHEMA_VERSION)
            rc = SC_ERRF(err, SC_ERR_VERSION,
                         "state database %s has schema version %d; this stagecraft uses %d",
                         s->path, v, SCHEMA_VERSION);
    } else {
        sqlite3_finalize(st);
        char sql[128];
        snprintf(sql, sizeof sql, "INSERT INTO meta(key, value) VALUES('schema_version', '%d')",
                 SCHEMA_VERSION);
        return exec(s, sql, err);
    }
    sqlite3_finalize(st);
    return rc;
}

sc_status coord_store_open(coord_store **out, const char *dir, sc_err *err)
{
    *out = NULL;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return SC_ERRF(err, SC_ERR_IO, "cannot create state folder %s: %s", dir, strerror(errno));
    coord_store *s = calloc(1, sizeof *s);
    SC_ALLOC_CHECK(s, err);
    snprintf(s->path, sizeof s->path, "%s/stagecraft.db", dir);
    sc_strlcpy(s->dir, dir, sizeof s->dir);
    sc_status rc = SC_OK;
    if (sqlite3_open_v2(s->path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
        SQLITE_OK) {
        rc = db_fail(s, err, "open");
        goto fail;
    }
    sqlite3_busy_timeout(s->db, 5000);
    /* the write-ahead log goes back to its start after each checkpoint of 256 pages, and is cut
     * back to 1 MiB: a full disk leaves it room to go on in the reserve */
    SC_CHECK_GOTO(exec(s,
                       "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; "
                       "PRAGMA wal_autocheckpoint=256; PRAGMA journal_size_limit=1048576;",
                       err),
                  fail);
    SC_CHECK_GOTO(exec(s, schema, err), fail);
    SC_CHECK_GOTO(check_schema_version(s, err), fail);
    SC_CHECK_GOTO(add_new_columns(s, err), fail);
    coord_reserve_init(&s->reserve, dir, COORD_RESERVE_BYTES);
    if (!s->reserve.held)
        SC_LOG_WARN(LOG,
                    "state folder %s: cannot keep %zu MiB in reserve (%s): a disk that fills "
                    "will stop the jobs' records at once",
                    dir, COORD_RESERVE_BYTES >> 20, s->reserve.path);
    *out = s;
    return SC_OK;
fail:
    coord_store_close(&s);
    return rc;
}

void coord_store_close(coord_store **store)
{
    if (store == NULL || *store == NULL)
        return;
    sqlite3_close((*store)->db);
    free(*store);
    *store = NULL;
}

static char *dup_text(sqlite3_stmt *st, int col)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    return t ? strdup((const char *)t) : NULL;
}

static void copy_text(char *dst, size_t size, sqlite3_stmt *st, int col)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    sc_strlcpy(dst, t ? (const char *)t : "", size);
}

#define JOB_COLUMNS                                                                                \
    "id, name, state, reason, spec_json, plan_json, step, steps, last_checkpoint_step, "           \
    "created_ms, updated_ms, workers, checkpoint_error"

static void job_from_row(sqlite3_stmt *st, coord_job *job)
{
    memset(job, 0, sizeof *job);
    copy_text(job->id, sizeof job->id, st, 0);
    copy_text(job->name, sizeof job->name, st, 1);
    if (!coord_job_state_parse((const char *)sqlite3_column_text(st, 2), &job->state))
        job->state = COORD_JOB_FAILED;
    copy_text(job->reason, sizeof job->reason, st, 3);
    job->spec_json = dup_text(st, 4);
    job->plan_json = dup_text(st, 5);
    job->step = (uint64_t)sqlite3_column_int64(st, 6);
    job->steps = (uint64_t)sqlite3_column_int64(st, 7);
    job->last_checkpoint_step = (uint64_t)sqlite3_column_int64(st, 8);
    job->created_unix_ms = sqlite3_column_int64(st, 9);
    job->updated_unix_ms = sqlite3_column_int64(st, 10);
    job->worker_ids = dup_text(st, 11);
    copy_text(job->checkpoint_error, sizeof job->checkpoint_error, st, 12);
}

static sc_status job_insert_once(coord_store *s, coord_job *job, sc_err *err)
{
    sqlite3_stmt *st = NULL;
    sc_status rc = SC_OK;
    int64_t now = now_unix_ms();
    SC_CHECK(exec(s, "BEGIN IMMEDIATE", err));
    SC_CHECK_GOTO(prepare(s,
                          "INSERT INTO jobs(name, state, reason, spec_json, steps, created_ms, "
                          "updated_ms) VALUES(?, 'submitted', ?, ?, ?, ?, ?)",
                          &st, err),
                  rollback);
    sqlite3_bind_text(st, 1, job->name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, job->reason[0] ? job->reason : "submitted", -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, job->spec_json ? job->spec_json : "{}", -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)job->steps);
    sqlite3_bind_int64(st, 5, now);
    sqlite3_bind_int64(st, 6, now);
    if (sqlite3_step(st) != SQLITE_DONE) {
        rc = db_fail(s, err, "insert job");
        goto rollback;
    }
    sqlite3_finalize(st);
    st = NULL;
    snprintf(job->id, sizeof job->id, "job-%lld", (long long)sqlite3_last_insert_rowid(s->db));
    char sql[160];
    snprintf(sql, sizeof sql, "UPDATE jobs SET id='%s' WHERE seq=%lld", job->id,
             (long long)sqlite3_last_insert_rowid(s->db));
    SC_CHECK_GOTO(exec(s, sql, err), rollback);
    SC_CHECK_GOTO(prepare(s,
                          "INSERT INTO transitions(job_id, from_state, to_state, reason, at_ms) "
                          "VALUES(?, '', 'submitted', ?, ?)",
                          &st, err),
                  rollback);
    sqlite3_bind_text(st, 1, job->id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, job->reason[0] ? job->reason : "submitted", -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 3, now);
    if (sqlite3_step(st) != SQLITE_DONE) {
        rc = db_fail(s, err, "record transition");
        goto rollback;
    }
    sqlite3_finalize(st);
    SC_CHECK(exec(s, "COMMIT", err));
    job->state = COORD_JOB_SUBMITTED;
    job->created_unix_ms = job->updated_unix_ms = now;
    return SC_OK;
rollback:
    sqlite3_finalize(st);
    exec(s, "ROLLBACK", NULL);
    return rc;
}

sc_status coord_store_job_get(coord_store *s, const char *id, coord_job *job, sc_err *err)
{
    sqlite3_stmt *st;
    SC_CHECK(prepare(s, "SELECT " JOB_COLUMNS " FROM jobs WHERE id = ?", &st, err));
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    sc_status rc = SC_OK;
    int r = sqlite3_step(st);
    if (r == SQLITE_ROW)
        job_from_row(st, job);
    else if (r == SQLITE_DONE)
        rc = SC_ERRF(err, SC_ERR_NOT_FOUND, "no job with id '%s'", id);
    else
        rc = db_fail(s, err, "read job");
    sqlite3_finalize(st);
    return rc;
}

static sc_status job_transition_once(coord_store *s, const char *id, coord_job_state to,
                                     const char *reason, sc_err *err)
{
    coord_job job;
    sqlite3_stmt *st = NULL;
    sc_status rc = SC_OK;
    int64_t now = now_unix_ms();
    SC_CHECK(exec(s, "BEGIN IMMEDIATE", err));
    SC_CHECK_GOTO(coord_store_job_get(s, id, &job, err), rollback);
    coord_job_state from = job.state;
    coord_job_clear(&job);
    if (!coord_job_transition_allowed(from, to)) {
        rc = SC_ERRF(err, SC_ERR_PRECONDITION, "job %s cannot go from %s to %s", id,
                     coord_job_state_name(from), coord_job_state_name(to));
        goto rollback;
    }
    SC_CHECK_GOTO(
        prepare(s, "UPDATE jobs SET state=?, reason=?, updated_ms=? WHERE id=?", &st, err),
        rollback);
    sqlite3_bind_text(st, 1, coord_job_state_name(to), -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, reason, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 3, now);
    sqlite3_bind_text(st, 4, id, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) != SQLITE_DONE) {
        rc = db_fail(s, err, "update job state");
        goto rollback;
    }
    sqlite3_finalize(st);
    st = NULL;
    SC_CHECK_GOTO(prepare(s,
                          "INSERT INTO transitions(job_id, from_state, to_state, reason, at_ms) "
                          "VALUES(?, ?, ?, ?, ?)",
                          &st, err),
                  rollback);
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, coord_job_state_name(from), -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, coord_job_state_name(to), -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, reason, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 5, now);
    if (sqlite3_step(st) != SQLITE_DONE) {
        rc = db_fail(s, err, "record transition");
        goto rollback;
    }
    sqlite3_finalize(st);
    return exec(s, "COMMIT", err);
rollback:
    sqlite3_finalize(st);
    exec(s, "ROLLBACK", NULL);
    return rc;
}

/* Runs an UPDATE on one job by id (last bound parameter) and checks that it existed. */
static sc_status update_one(coord_store *s, sqlite3_stmt *st, const char *id, sc_err *err)
{
    sc_status rc = SC_OK;
    if (sqlite3_step(st) != SQLITE_DONE)
        rc = db_fail(s, err, "update job");
    else if (sqlite3_changes(s->db) == 0)
        rc = SC_ERRF(err, SC_ERR_NOT_FOUND, "no job with id '%s'", id);
    sqlite3_finalize(st);
    return rc;
}

static sc_status job_set_plan_once(coord_store *s, const char *id, const char *plan_json,
                                   sc_err *err)
{
    sqlite3_stmt *st;
    SC_CHECK(prepare(s, "UPDATE jobs SET plan_json=?, updated_ms=? WHERE id=?", &st, err));
    sqlite3_bind_text(st, 1, plan_json, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, now_unix_ms());
    sqlite3_bind_text(st, 3, id, -1, SQLITE_TRANSIENT);
    return update_one(s, st, id, err);
}

static sc_status job_set_reason_once(coord_store *s, const char *id, const char *reason,
                                     sc_err *err)
{
    sqlite3_stmt *st;
    SC_CHECK(prepare(s, "UPDATE jobs SET reason=?, updated_ms=? WHERE id=?", &st, err));
    sqlite3_bind_text(st, 1, reason, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, now_unix_ms());
    sqlite3_bind_text(st, 3, id, -1, SQLITE_TRANSIENT);
    return update_one(s, st, id, err);
}

static sc_status job_amend_reason_once(coord_store *s, const char *id, const char *reason,
                                       sc_err *err)
{
    SC_CHECK(exec(s, "BEGIN IMMEDIATE", err));
    sc_status rc = job_set_reason_once(s, id, reason, err);
    sqlite3_stmt *st = NULL;
    if (rc == SC_OK)
        rc = prepare(s,
                     "UPDATE transitions SET reason=? WHERE seq=(SELECT MAX(seq) FROM transitions "
                     "WHERE job_id=?)",
                     &st, err);
    if (rc == SC_OK) {
        sqlite3_bind_text(st, 1, reason, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, id, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(st) != SQLITE_DONE)
            rc = db_fail(s, err, "amend transition");
        sqlite3_finalize(st);
    }
    if (rc != SC_OK) {
        exec(s, "ROLLBACK", NULL);
        return rc;
    }
    return exec(s, "COMMIT", err);
}

static sc_status job_set_workers_once(coord_store *s, const char *id, const char *worker_ids,
                                      sc_err *err)
{
    sqlite3_stmt *st;
    SC_CHECK(prepare(s, "UPDATE jobs SET workers=?, updated_ms=? WHERE id=?", &st, err));
    if (worker_ids)
        sqlite3_bind_text(st, 1, worker_ids, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, 1);
    sqlite3_bind_int64(st, 2, now_unix_ms());
    sqlite3_bind_text(st, 3, id, -1, SQLITE_TRANSIENT);
    return update_one(s, st, id, err);
}

static sc_status job_set_progress_once(coord_store *s, const char *id, uint64_t step,
                                       uint64_t last_checkpoint_step, sc_err *err)
{
    sqlite3_stmt *st;
    SC_CHECK(prepare(s, "UPDATE jobs SET step=?, last_checkpoint_step=?, updated_ms=? WHERE id=?",
                     &st, err));
    sqlite3_bind_int64(st, 1, (sqlite3_int64)step);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)last_checkpoint_step);
    sqlite3_bind_int64(st, 3, now_unix_ms());
    sqlite3_bind_text(st, 4, id, -1, SQLITE_TRANSIENT);
    return update_one(s, st, id, err);
}

static sc_status job_set_checkpoint_error_once(coord_store *s, const char *id, const char *text,
                                               sc_err *err)
{
    sqlite3_stmt *st;
    SC_CHECK(prepare(s, "UPDATE jobs SET checkpoint_error=?, updated_ms=? WHERE id=?", &st, err));
    sqlite3_bind_text(st, 1, text ? text : "", -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, now_unix_ms());
    sqlite3_bind_text(st, 3, id, -1, SQLITE_TRANSIENT);
    return update_one(s, st, id, err);
}

sc_status coord_store_job_list(coord_store *s, coord_job **jobs, size_t *n, sc_err *err)
{
    *jobs = NULL;
    *n = 0;
    sqlite3_stmt *st;
    SC_CHECK(prepare(s, "SELECT " JOB_COLUMNS " FROM jobs ORDER BY seq", &st, err));
    size_t cap = 0;
    int r;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            coord_job *grown = realloc(*jobs, cap * sizeof **jobs);
            if (grown == NULL) {
                sqlite3_finalize(st);
                coord_job_list_free(jobs, *n);
                *n = 0;
                return SC_ERRF(err, SC_ERR_NOMEM, "out of memory listing jobs");
            }
            *jobs = grown;
        }
        job_from_row(st, &(*jobs)[(*n)++]);
    }
    sqlite3_finalize(st);
    if (r != SQLITE_DONE) {
        coord_job_list_free(jobs, *n);
        *n = 0;
        return db_fail(s, err, "list jobs");
    }
    return SC_OK;
}

sc_status coord_store_job_history(coord_store *s, const char *id, coord_transition **out, size_t *n,
                                  sc_err *err)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st;
    SC_CHECK(prepare(s,
                     "SELECT from_state, to_state, reason, at_ms FROM transitions "
                     "WHERE job_id=? ORDER BY seq",
                     &st, err));
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    size_t cap = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? cap * 2 : 8;
            coord_transition *grown = realloc(*out, cap * sizeof **out);
            if (grown == NULL) {
                sqlite3_finalize(st);
                free(*out);
                *out = NULL;
                *n = 0;
                return SC_ERRF(err, SC_ERR_NOMEM, "out of memory reading history");
            }
            *out = grown;
        }
        coord_transition *t = &(*out)[(*n)++];
        const char *from = (const char *)sqlite3_column_text(st, 0);
        if (from == NULL || !coord_job_state_parse(from, &t->from))
            t->from = COORD_JOB_SUBMITTED;
        if (!coord_job_state_parse((const char *)sqlite3_column_text(st, 1), &t->to))
            t->to = COORD_JOB_FAILED;
        copy_text(t->reason, sizeof t->reason, st, 2);
        t->at_unix_ms = sqlite3_column_int64(st, 3);
    }
    sqlite3_finalize(st);
    return SC_OK;
}

static sc_status trace_put_once(coord_store *s, const char *job_id, const char *trace_json,
                                const char *meta_json, sc_err *err)
{
    sqlite3_stmt *st;
    SC_CHECK(prepare(s,
                     "INSERT OR REPLACE INTO traces(job_id, trace_json, meta_json, kept_ms) "
                     "VALUES(?, ?, ?, ?)",
                     &st, err));
    sqlite3_bind_text(st, 1, job_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, trace_json, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, meta_json, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 4, now_unix_ms());
    int r = sqlite3_step(st);
    sqlite3_finalize(st);
    return r == SQLITE_DONE ? SC_OK : db_fail(s, err, "keep a trace");
}

sc_status coord_store_trace_get(coord_store *s, const char *job_id, char **trace_json,
                                char **meta_json, sc_err *err)
{
    *trace_json = *meta_json = NULL;
    sqlite3_stmt *st;
    SC_CHECK(prepare(s, "SELECT trace_json, meta_json FROM traces WHERE job_id=?", &st, err));
    sqlite3_bind_text(st, 1, job_id, -1, SQLITE_TRANSIENT);
    sc_status rc = SC_OK;
    if (sqlite3_step(st) != SQLITE_ROW) {
        rc = SC_ERRF(err, SC_ERR_NOT_FOUND, "no trace kept for job %s", job_id);
    } else {
        *trace_json = dup_text(st, 0);
        *meta_json = dup_text(st, 1);
        if (*trace_json == NULL || *meta_json == NULL) {
            free(*trace_json);
            free(*meta_json);
            *trace_json = *meta_json = NULL;
            rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory reading the trace of job %s", job_id);
        }
    }
    sqlite3_finalize(st);
    return rc;
}

/* ---- training series (history.h) ---------------------------------------------------------- */

/* Appends one row of job `job_id`'s series. */
static sc_status history_insert(coord_store *s, const char *job_id, const coord_history_point *p,
                                sc_err *err)
{
    sqlite3_stmt *st;
    SC_CHECK(prepare(s,
                     "INSERT OR REPLACE INTO history(job_id, step, loss, samples_per_s, "
                     "iteration_s, at_ms) VALUES(?, ?, ?, ?, ?, ?)",
                     &st, err));
    sqlite3_bind_text(st, 1, job_id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)p->step);
    if (p->has_loss)
        sqlite3_bind_double(st, 3, p->loss);
    else
        sqlite3_bind_null(st, 3);
    if (p->samples_per_s_known)
        sqlite3_bind_double(st, 4, p->samples_per_s);
    else
        sqlite3_bind_null(st, 4);
    sqlite3_bind_double(st, 5, p->iteration_s);
    sqlite3_bind_int64(st, 6, p->at_unix_ms);
    int r = sqlite3_step(st);
    sqlite3_finalize(st);
    return r == SQLITE_DONE ? SC_OK : db_fail(s, err, "record a step of a job's history");
}

/* Runs `sql` with job_id bound to ?1 and `step` to ?2 (when it has one). */
static sc_status history_exec(coord_store *s, const char *sql, const char *job_id, uint64_t step,
                              sc_err *err)
{
    sqlite3_stmt *st;
    SC_CHECK(prepare(s, sql, &st, err));
    sqlite3_bind_text(st, 1, job_id, -1, SQLITE_TRANSIENT);
    if (sqlite3_bind_parameter_count(st) > 1)
        sqlite3_bind_int64(st, 2, (sqlite3_int64)step);
    int r = sqlite3_step(st);
    sqlite3_finalize(st);
    return r == SQLITE_DONE ? SC_OK : db_fail(s, err, "update a job's history");
}

sc_status coord_store_history_get(coord_store *s, const char *job_id, coord_history_point **out,
                                  size_t *n, sc_err *err)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st;
    SC_CHECK(prepare(s,
                     "SELECT step, loss, samples_per_s, iteration_s, at_ms FROM history "
                     "WHERE job_id=? ORDER BY step",
                     &st, err));
    sqlite3_bind_text(st, 1, job_id, -1, SQLITE_TRANSIENT);
    size_t cap = 0;
    coord_history_point *pts = NULL;
    sc_status rc = SC_OK;
    int r;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            size_t want = cap ? 2 * cap : 64;
            coord_history_point *grown = realloc(pts, want * sizeof *pts);
            if (grown == NULL) {
                rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory reading the history of job %s",
                             job_id);
                break;
            }
            pts = grown;
            cap = want;
        }
        coord_history_point *p = &pts[(*n)++];
        p->step = (uint64_t)sqlite3_column_int64(st, 0);
        p->has_loss = sqlite3_column_type(st, 1) != SQLITE_NULL;
        p->loss = p->has_loss ? sqlite3_column_double(st, 1) : 0;
        p->samples_per_s_known = sqlite3_column_type(st, 2) != SQLITE_NULL;
        p->samples_per_s = p->samples_per_s_known ? sqlite3_column_double(st, 2) : 0;
        p->iteration_s = sqlite3_column_double(st, 3);
        p->at_unix_ms = sqlite3_column_int64(st, 4);
    }
    if (rc == SC_OK && r != SQLITE_DONE)
        rc = db_fail(s, err, "read a job's history");
    sqlite3_finalize(st);
    if (rc != SC_OK) {
        free(pts);
        *n = 0;
        return rc;
    }
    *out = pts;
    return SC_OK;
}

/* Within the caller's transaction: thins job_id's series to coord_history_thin's choice when it
 * holds more than `max` points. */
static sc_status history_bound(coord_store *s, const char *job_id, size_t max, sc_err *err)
{
    sqlite3_stmt *st;
    SC_CHECK(prepare(s, "SELECT COUNT(*) FROM history WHERE job_id=?", &st, err));
    sqlite3_bind_text(st, 1, job_id, -1, SQLITE_TRANSIENT);
    size_t count = sqlite3_step(st) == SQLITE_ROW ? (size_t)sqlite3_column_int64(st, 0) : 0;
    sqlite3_finalize(st);
    if (count <= max)
        return SC_OK;
    coord_history_point *pts = NULL;
    size_t n = 0;
    SC_CHECK(coord_store_history_get(s, job_id, &pts, &n, err));
    size_t kept = coord_history_thin(pts, n);
    sc_status rc = history_exec(s, "DELETE FROM history WHERE job_id=?", job_id, 0, err);
    for (size_t i = 0; rc == SC_OK && i < kept; i++)
        rc = history_insert(s, job_id, &pts[i], err);
    free(pts);
    return rc;
}

static sc_status history_add_once(coord_store *s, const char *job_id,
                                  const coord_history_point *pts, size_t n, size_t max, sc_err *err)
{
    if (n == 0)
        return SC_OK;
    SC_CHECK(exec(s, "BEGIN IMMEDIATE", err));
    /* steps at or after the first one are of a run that did not last (the job resumed before
     * them) */
    sc_status rc = history_exec(s, "DELETE FROM history WHERE job_id=?1 AND step>=?2", job_id,
                                pts[0].step, err);
    for (size_t i = 0; rc == SC_OK && i < n; i++)
        rc = history_insert(s, job_id, &pts[i], err);
    if (rc == SC_OK)
        rc = history_bound(s, job_id, max, err);
    if (rc == SC_OK)
        return exec(s, "COMMIT", err);
    exec(s, "ROLLBACK", NULL);
    return rc;
}

void coord_job_clear(coord_job *job)
{
    if (job == NULL)
        return;
    free(job->spec_json);
    free(job->plan_json);
    free(job->worker_ids);
    job->spec_json = job->plan_json = job->worker_ids = NULL;
}

void coord_job_list_free(coord_job **jobs, size_t n)
{
    if (jobs == NULL || *jobs == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        coord_job_clear(&(*jobs)[i]);
    free(*jobs);
    *jobs = NULL;
}

static sc_status worker_put_once(coord_store *s, const coord_worker_rec *w, sc_err *err)
{
    sqlite3_stmt *st;
    SC_CHECK(prepare(s,
                     "INSERT OR REPLACE INTO workers(id, name, host, endpoint, epoch, hardware, "
                     "registered_ms) VALUES(?, ?, ?, ?, ?, ?, ?)",
                     &st, err));
    sqlite3_bind_text(st, 1, w->id, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, w->name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, w->host, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 4, w->endpoint, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 5, (sqlite3_int64)w->epoch);
    sqlite3_bind_blob(st, 6, w->hardware, (int)w->hardware_len, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 7, w->registered_unix_ms ? w->registered_unix_ms : now_unix_ms());
    sc_status rc = sqlite3_step(st) == SQLITE_DONE ? SC_OK : db_fail(s, err, "store worker");
    sqlite3_finalize(st);
    return rc;
}

sc_status coord_store_worker_list(coord_store *s, coord_worker_rec **out, size_t *n, sc_err *err)
{
    *out = NULL;
    *n = 0;
    sqlite3_stmt *st;
    SC_CHECK(prepare(s,
                     "SELECT id, name, host, endpoint, epoch, hardware, registered_ms "
                     "FROM workers ORDER BY registered_ms, id",
                     &st, err));
    size_t cap = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            coord_worker_rec *grown = realloc(*out, cap * sizeof **out);
            if (grown == NULL) {
                sqlite3_finalize(st);
                coord_worker_list_free(out, *n);
                *n = 0;
                return SC_ERRF(err, SC_ERR_NOMEM, "out of memory listing workers");
            }
            *out = grown;
        }
        coord_worker_rec *w = &(*out)[(*n)++];
        memset(w, 0, sizeof *w);
        copy_text(w->id, sizeof w->id, st, 0);
        copy_text(w->name, sizeof w->name, st, 1);
        copy_text(w->host, sizeof w->host, st, 2);
        copy_text(w->endpoint, sizeof w->endpoint, st, 3);
        w->epoch = (uint64_t)sqlite3_column_int64(st, 4);
        int len = sqlite3_column_bytes(st, 5);
        if (len > 0) {
            w->hardware = malloc((size_t)len);
            if (w->hardware != NULL) {
                memcpy(w->hardware, sqlite3_column_blob(st, 5), (size_t)len);
                w->hardware_len = (size_t)len;
            }
        }
        w->registered_unix_ms = sqlite3_column_int64(st, 6);
    }
    sqlite3_finalize(st);
    return SC_OK;
}

void coord_worker_list_free(coord_worker_rec **list, size_t n)
{
    if (list == NULL || *list == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        free((*list)[i].hardware);
    free(*list);
    *list = NULL;
}

/* ---- the writes, each run once more in the reserve's room when the disk is full -------- */

sc_status coord_store_job_transition(coord_store *s, const char *id, coord_job_state to,
                                     const char *reason, sc_err *err)
{
    WRITE(s, job_transition_once(s, id, to, reason, err));
}

sc_status coord_store_job_set_plan(coord_store *s, const char *id, const char *plan_json,
                                   sc_err *err)
{
    WRITE(s, job_set_plan_once(s, id, plan_json, err));
}

sc_status coord_store_job_set_reason(coord_store *s, const char *id, const char *reason,
                                     sc_err *err)
{
    WRITE(s, job_set_reason_once(s, id, reason, err));
}

sc_status coord_store_job_amend_reason(coord_store *s, const char *id, const char *reason,
                                       sc_err *err)
{
    WRITE(s, job_amend_reason_once(s, id, reason, err));
}

sc_status coord_store_job_set_workers(coord_store *s, const char *id, const char *worker_ids,
                                      sc_err *err)
{
    WRITE(s, job_set_workers_once(s, id, worker_ids, err));
}

sc_status coord_store_job_set_progress(coord_store *s, const char *id, uint64_t step,
                                       uint64_t last_checkpoint_step, sc_err *err)
{
    WRITE(s, job_set_progress_once(s, id, step, last_checkpoint_step, err));
}

sc_status coord_store_job_set_checkpoint_error(coord_store *s, const char *id, const char *text,
                                               sc_err *err)
{
    WRITE(s, job_set_checkpoint_error_once(s, id, text, err));
}

sc_status coord_store_worker_put(coord_store *s, const coord_worker_rec *w, sc_err *err)
{
    WRITE(s, worker_put_once(s, w, err));
}

/* A write of something new (a job, a trace, a series): it takes no room from the reserve. */
static sc_status write_new(coord_store *s, sc_status rc)
{
    settle(s);
    if (rc != SC_OK && s->last_full)
        mark_full(s);
    return after_write(s, rc);
}

sc_status coord_store_job_insert(coord_store *s, coord_job *job, sc_err *err)
{
    if (!room_again(s, true))
        return SC_ERRF(err, SC_ERR_TOO_LARGE,
                       "the coordinator's state folder %s is full: no new job is accepted until "
                       "there is %zu MiB free there (the room left is kept for the jobs already "
                       "accepted); free space on its disk",
                       s->dir, 2 * s->reserve.bytes >> 20);
    s->last_full = false;
    return write_new(s, job_insert_once(s, job, err));
}

/* A trace and a training series are not kept while the disk is full (said once, as it fills). */
sc_status coord_store_trace_put(coord_store *s, const char *job_id, const char *trace_json,
                                const char *meta_json, sc_err *err)
{
    if (!room_again(s, false))
        return SC_OK;
    s->last_full = false;
    return write_new(s, trace_put_once(s, job_id, trace_json, meta_json, err));
}

sc_status coord_store_history_add(coord_store *s, const char *job_id,
                                  const coord_history_point *pts, size_t n, size_t max, sc_err *err)
{
    if (!room_again(s, false))
        return SC_OK;
    s->last_full = false;
    return write_new(s, history_add_once(s, job_id, pts, n, max, err));
}
