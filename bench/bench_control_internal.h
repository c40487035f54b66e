/*
 * Declarations shared by bench_control's files; not a library interface.
 *
 *   bench_control.c          options, the run's phases in order, clean-up
 *   bench_control_coord.c    the coordinator under test: the forked child, /proc readings,
 *                            ListWorkers and its log
 *   bench_control_workers.c  the simulated workers: registration threads, the heartbeat loop
 *   bench_control_report.c   the printed figures and the healthy verdict
 */
#ifndef BENCH_CONTROL_INTERNAL_H
#define BENCH_CONTROL_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/sc_status.h"
#include "proto/sc_control.h"

#define WARMUP_MS 2000 /* after the last registration, before the measured window */
#define GRACE_MS 1000  /* after the window: acks still counted for window heartbeats */
#define RPC_TIMEOUT_MS 30000

typedef struct {
    int64_t workers;
    int64_t seconds;
    int64_t reg_threads;
    int64_t coord_nofile; /* 0: inherit */
    bool keep_state;
} bench_opts;

/* ---- the coordinator under test (bench_control_coord.c) ------------------------------------ */

typedef struct {
    int ok;
    int port;
    char control_endpoint[300];
    char error[SC_ERR_MSG_MAX];
} child_report;

typedef struct {
    size_t alive, suspect, dead, other, total;
    bool ok;
    char error[SC_ERR_MSG_MAX];
} worker_census;

/* Liveness changes and other complaints the coordinator logged (it runs at level warn). */
typedef struct {
    size_t suspect, dead, warnings;
    char first[512];
} log_scan;

/* Runs in the forked child: a coordinator on loopback until SIGTERM, its child_report written
 * to report_fd once it listens. Returns the child's exit status. */
int bench_coordinator_child(const bench_opts *o, pid_t parent, const char *state_dir,
                            const char *join_token, const char *client_token, int report_fd);

/* Waits up to timeout_ms for the child's report; false if it died or said nothing. */
bool bench_read_child_report(int fd, child_report *rep, int timeout_ms);

/* SIGTERM, then SIGKILL after 10 s; reaps the child. */
void bench_stop_child(pid_t pid);

/* A "Key:   value kB" line of /proc/PID/status, as a number (kB for memory); -1 if absent. */
long long bench_proc_status_value(pid_t pid, const char *key);

/* utime + stime of a process, in seconds; -1 if unreadable. */
double bench_proc_cpu_s(pid_t pid);

/* Open descriptors of a process, and how many of them are sockets. */
void bench_proc_fds(pid_t pid, long *total, long *sockets);

/* The three load averages as text, "" when unreadable. */
void bench_read_loadavg(char *out, size_t size);

/* ListWorkers at `target`, counted by state; c->ok false with c->error on failure. */
void bench_list_workers(const char *target, worker_census *c);

/* Counts the suspect/dead transitions and warnings in STATE/coordinator.log. */
void bench_scan_coordinator_log(const char *state_dir, log_scan *s);

/* ---- the simulated workers (bench_control_workers.c) ----------------------------------------- */

typedef struct {
    char id[SC_CTL_PEER_ID_MAX]; /* written by its registration thread before `ready` */
    uint64_t epoch;
    char curve_public[SC_CTL_KEY_Z85_LEN + 1]; /* its own key pair, "" without CURVE */
    char curve_secret[SC_CTL_KEY_Z85_LEN + 1];
    char server_key[SC_CTL_KEY_Z85_LEN + 1]; /* the coordinator's, "" for plaintext */
    atomic_int ready; /* 1 once registered (release/acquire with the fields above) */
    sc_ctl *ctl;      /* owned by the heartbeat thread */
    void *sock;
    uint64_t seq;
} bench_worker;

typedef struct {
    bench_worker *w;
    size_t n;
    void *zctx;
    char control_endpoint[300];
    int epfd;
    uint64_t t0_ns;
    _Atomic uint64_t win_start_ns; /* 0 until the main thread fixes the window */
    _Atomic uint64_t win_end_ns;
    atomic_int stop;

    /* Owned by the heartbeat thread; the main thread reads them after joining it. */
    uint64_t sent_total, acks_total;
    uint64_t sent_win, acked_win, send_failures_win;
    uint64_t unknown_acks, error_replies, other_msgs, recv_errors, setup_failures;
    uint64_t max_lag_ns_win; /* how late a window heartbeat left after its due time */
    double *rtt_ms;          /* round trips of window heartbeats */
    size_t n_rtt, cap_rtt;
    char first_problem[SC_ERR_MSG_MAX + 128];
} hb_loop;

typedef struct {
    hb_loop *h;
    const char *target;
    const char *join_token;
    size_t first, stride;
    double *lat_ms; /* one per registration attempted by this thread */
    size_t n_lat;
    size_t failures;
    char first_error[SC_ERR_MSG_MAX + 64];
} reg_thread;

/* The heartbeat thread (arg: the hb_loop): sends each ready worker's heartbeat in its slot and
 * reads the acks, until h->stop. */
void *bench_heartbeat_main(void *arg);

/* A registration thread (arg: its reg_thread): registers workers first, first + stride, ... */
void *bench_register_main(void *arg);

/* ---- the report (bench_control_report.c) ----------------------------------------------------- */

/* Everything the report prints besides the heartbeat loop's own counters. */
typedef struct {
    int argc;
    char **argv;
    pid_t child;
    const char *target, *control_endpoint, *load_start, *load_end;
    size_t reg_threads;
    double reg_s;
    double *reg_lat; /* sorted here */
    size_t n_lat, reg_failures;
    const char *reg_error;
    double win_s;
    long long rss_idle_kb, rss_reg_kb, rss_q_kb[5], hwm_kb, coord_threads;
    long long self_rss_kb;
    double coord_cpu_s, self_cpu_s;
    long fds, fd_sockets;
    long long nofile; /* the coordinator's soft limit, -1 when unreadable */
    worker_census census;
    log_scan ls;
} bench_figures;

/* Prints the figures; returns whether the run was healthy (every worker registered and alive
 * throughout, no error reply). Sorts h->rtt_ms and f->reg_lat. */
bool bench_print_report(hb_loop *h, bench_figures *f);

#endif /* BENCH_CONTROL_INTERNAL_H */
