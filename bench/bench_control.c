/*
 * bench_control: load on the control plane. A real coordinator (coord_new + coord_run, forked
 * into a child process so its memory, CPU time and file descriptors can be read on their own
 * from /proc) serves N simulated workers that live in this process:
 *
 *   phase 1  every worker registers over gRPC (RegisterWorker with the join token and a
 *            one-device cpu HardwareReport) from a few client threads: registrations/s and the
 *            per-call latency;
 *   phase 2  every worker heartbeats at 1 Hz on its own ZeroMQ DEALER (routing id = its worker
 *            id), the N send times spread evenly over each second, for D seconds: heartbeats
 *            acknowledged per second, the round trip (send -> ack receipt) p50/p99/max, lost
 *            heartbeats, the coordinator's RSS, CPU time and open descriptors; at the end
 *            ListWorkers must show every worker alive and the coordinator's log must hold no
 *            suspect/dead transition.
 *
 * All DEALERs share one ZeroMQ context and one heartbeat thread (bench_control_workers.c).
 * Workers start heartbeating as soon as they are registered, as real ones do, so that early
 * registrants are not declared suspect while the later ones register.
 *
 * This file holds the options and the run's phases in order; the coordinator child lives in
 * bench_control_coord.c and the printed report in bench_control_report.c.
 *
 * Not a test: it prints figures and never judges wall-clock speed, except to print whether the
 * issue's goal (1000 workers, p99 < 20 ms) was met. Exit 0 when the run was healthy (every worker
 * registered and stayed alive), 1 when it was not or the coordinator failed, 2 on bad usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zmq.h>

#include "bench/bench_control_internal.h"
#include "common/sc_clock.h"
#include "common/sc_log.h"
#include "common/sc_status.h"
#include "common/sc_util.h"

#define MAX_WORKERS 100000
#define MAX_REG_THREADS 64

static const char usage_text[] =
    "usage: bench_control [--workers N] [--seconds D] [--reg-threads T] [--coord-nofile K]\n"
    "                     [--keep-state]\n"
    "  --workers N       simulated workers (1..100000, default 1000)\n"
    "  --seconds D       measured heartbeat window in seconds (1..3600, default 10)\n"
    "  --reg-threads T   gRPC client threads registering the workers (1..64, default 4)\n"
    "  --coord-nofile K  set the coordinator's open-file soft limit to K (default: inherited)\n"
    "  --keep-state      keep the coordinator's state folder (its database and log) and print\n"
    "                    its path instead of removing it\n";

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* ---- main ----------------------------------------------------------------------------------- */

static int parse_args(int argc, char **argv, bench_opts *o)
{
    static const struct option longopts[] = {
        {"workers", required_argument, NULL, 'w'},
        {"seconds", required_argument, NULL, 's'},
        {"reg-threads", required_argument, NULL, 't'},
        {"coord-nofile", required_argument, NULL, 'f'},
        {"keep-state", no_argument, NULL, 'k'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    o->workers = 1000;
    o->seconds = 10;
    o->reg_threads = 4;
    o->coord_nofile = 0;
    o->keep_state = false;
    int ch;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        sc_err err;
        sc_err_clear(&err);
        sc_status rc = SC_OK;
        switch (ch) {
        case 'w':
            rc = sc_parse_int64(optarg, 1, MAX_WORKERS, "--workers", &o->workers, &err);
            break;
        case 's':
            rc = sc_parse_int64(optarg, 1, 3600, "--seconds", &o->seconds, &err);
            break;
        case 't':
            rc = sc_parse_int64(optarg, 1, MAX_REG_THREADS, "--reg-threads", &o->reg_threads, &err);
            break;
        case 'f':
            rc = sc_parse_int64(optarg, 16, 1 << 24, "--coord-nofile", &o->coord_nofile, &err);
            break;
        case 'k':
            o->keep_state = true;
            break;
        case 'h':
            fputs(usage_text, stdout);
            return -1;
        default:
            fprintf(stderr, "bench_control: unknown flag or missing value: %s\n%s",
                    argv[optind - 1], usage_text);
            return 2;
        }
        if (rc != SC_OK) {
            fprintf(stderr, "bench_control: %s\n%s", err.msg, usage_text);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "bench_control: unexpected argument '%s'\n%s", argv[optind], usage_text);
        return 2;
    }
    return 0;
}

static bool make_token(char *out, size_t size)
{
    unsigned char raw[16];
    int fd = open("/dev/urandom", O_RDONLY);
    bool ok = fd >= 0 && read(fd, raw, sizeof raw) == (ssize_t)sizeof raw;
    if (fd >= 0)
        close(fd);
    for (size_t i = 0; ok && i < sizeof raw && 2 * i + 2 < size; i++)
        snprintf(out + 2 * i, size - 2 * i, "%02x", raw[i]);
    return ok;
}

static void sleep_until(uint64_t t_ns)
{
    uint64_t now = sc_clock_now_ns();
    if (t_ns > now)
        sc_clock_sleep_ms((t_ns - now + 999999) / 1000000);
}

int main(int argc, char **argv)
{
    bench_opts o;
    int prc = parse_args(argc, argv, &o);
    if (prc != 0)
        return prc < 0 ? 0 : prc;
    sc_log_set_level(SC_LOG_WARN);
    const size_t n = (size_t)o.workers;

    const char *tmp = getenv("TMPDIR");
    char state_dir[1024];
    snprintf(state_dir, sizeof state_dir, "%s/sc-bench-control-XXXXXX",
             tmp && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(state_dir) == NULL) {
        fprintf(stderr, "bench_control: cannot create a state folder %s: %s\n", state_dir,
                strerror(errno));
        return 1;
    }
    char join_token[64] = "", client_token[64] = "";
    if (!make_token(join_token, sizeof join_token) ||
        !make_token(client_token, sizeof client_token)) {
        fprintf(stderr, "bench_control: cannot read /dev/urandom for the tokens\n");
        rmdir(state_dir);
        return 1;
    }
    char load_start[64];
    bench_read_loadavg(load_start, sizeof load_start);

    /* The coordinator is forked before this process starts any thread. */
    int pfd[2];
    if (pipe(pfd) != 0) {
        fprintf(stderr, "bench_control: pipe: %s\n", strerror(errno));
        rmdir(state_dir);
        return 1;
    }
    fflush(NULL);
    pid_t parent = getpid();
    pid_t child = fork();
    if (child < 0) {
        fprintf(stderr, "bench_control: fork: %s\n", strerror(errno));
        rmdir(state_dir);
        return 1;
    }
    if (child == 0) {
        close(pfd[0]);
        return bench_coordinator_child(&o, parent, state_dir, join_token, client_token, pfd[1]);
    }
    close(pfd[1]);

    int status = 1;
    hb_loop h;
    memset(&h, 0, sizeof h);
    h.epfd = -1;
    reg_thread *rt = NULL;
    double *reg_lat = NULL;
    pthread_t hb_thread;
    bool hb_started = false;
    child_report rep;
    memset(&rep, 0, sizeof rep);
    bool reported = bench_read_child_report(pfd[0], &rep, 30000);
    close(pfd[0]);
    if (!reported || !rep.ok) {
        fprintf(stderr, "bench_control: the coordinator did not start: %s\n",
                reported ? rep.error : "it exited or said nothing within 30 s (see its log)");
        goto done;
    }
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", rep.port);
    sc_strlcpy(h.control_endpoint, rep.control_endpoint, sizeof h.control_endpoint);
    long long rss_idle_kb = bench_proc_status_value(child, "VmRSS");

    /* Each DEALER holds a TCP connection and a notification descriptor. */
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rlim_t need = (rlim_t)(2 * n + 256);
    if (rl.rlim_cur < need) {
        rl.rlim_cur = need < rl.rlim_max ? need : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur < need) {
        fprintf(stderr,
                "bench_control: %zu workers need about %llu open files in this process; the "
                "hard limit is %llu (raise it with ulimit -Hn)\n",
                n, (unsigned long long)need, (unsigned long long)rl.rlim_max);
        goto done;
    }

    h.w = calloc(n, sizeof *h.w);
    h.n = n;
    h.cap_rtt = n * (size_t)(o.seconds + 2) + 1024;
    h.rtt_ms = malloc(h.cap_rtt * sizeof *h.rtt_ms);
    h.zctx = zmq_ctx_new();
    h.epfd = epoll_create1(EPOLL_CLOEXEC);
    reg_lat = malloc(n * sizeof *reg_lat);
    rt = calloc((size_t)o.reg_threads, sizeof *rt);
    if (h.w == NULL || h.rtt_ms == NULL || h.zctx == NULL || h.epfd < 0 || reg_lat == NULL ||
        rt == NULL) {
        fprintf(stderr, "bench_control: out of memory or descriptors setting up %zu workers\n", n);
        goto done;
    }
    if (zmq_ctx_set(h.zctx, ZMQ_MAX_SOCKETS, (int)n + 16) != 0) {
        fprintf(stderr, "bench_control: ZeroMQ refuses %zu sockets: %s\n", n + 16,
                zmq_strerror(zmq_errno()));
        goto done;
    }
    h.t0_ns = sc_clock_now_ns();
    if (pthread_create(&hb_thread, NULL, bench_heartbeat_main, &h) != 0) {
        fprintf(stderr, "bench_control: cannot start the heartbeat thread\n");
        goto done;
    }
    hb_started = true;

    /* Phase 1: registration. */
    fprintf(stderr, "bench_control: registering %zu workers with %lld threads...\n", n,
            (long long)o.reg_threads);
    size_t nt = (size_t)o.reg_threads;
    pthread_t reg_tid[MAX_REG_THREADS];
    size_t lat_off = 0;
    for (size_t t = 0; t < nt; t++) {
        rt[t].h = &h;
        rt[t].target = target;
        rt[t].join_token = join_token;
        rt[t].first = t;
        rt[t].stride = nt;
        rt[t].lat_ms = reg_lat + lat_off;
        lat_off += t < n ? (n - t + nt - 1) / nt : 0;
    }
    uint64_t reg_start = sc_clock_now_ns();
    size_t started = 0;
    for (; started < nt; started++)
        if (pthread_create(&reg_tid[started], NULL, bench_register_main, &rt[started]) != 0)
            break;
    for (size_t t = 0; t < started; t++)
        pthread_join(reg_tid[t], NULL);
    uint64_t reg_end = sc_clock_now_ns();
    if (started < nt) {
        fprintf(stderr, "bench_control: could start only %zu registration threads\n", started);
        goto done;
    }
    size_t reg_failures = 0, n_lat = 0;
    const char *reg_error = "";
    for (size_t t = 0; t < nt; t++) {
        reg_failures += rt[t].failures;
        if (rt[t].failures && reg_error[0] == '\0')
            reg_error = rt[t].first_error;
        /* Compact the per-thread latencies into one array. */
        memmove(reg_lat + n_lat, rt[t].lat_ms, rt[t].n_lat * sizeof *reg_lat);
        n_lat += rt[t].n_lat;
    }
    long long rss_reg_kb = bench_proc_status_value(child, "VmRSS");

    /* Phase 2: the measured heartbeat window. */
    uint64_t w0 = reg_end + WARMUP_MS * 1000000ull;
    uint64_t w1 = w0 + (uint64_t)o.seconds * 1000000000ull;
    atomic_store(&h.win_end_ns, w1);
    atomic_store(&h.win_start_ns, w0);
    fprintf(stderr,
            "bench_control: %zu registered; heartbeating, measuring %lld s after %d ms "
            "of warm-up...\n",
            n - reg_failures, (long long)o.seconds, WARMUP_MS);
    sleep_until(w0);
    double coord_cpu0 = bench_proc_cpu_s(child), self_cpu0 = bench_proc_cpu_s(getpid());
    /* RSS at each quarter of the window: a plateau is buffers filling, steady growth a leak. */
    long long rss_q_kb[5];
    rss_q_kb[0] = bench_proc_status_value(child, "VmRSS");
    for (int q = 1; q <= 4; q++) {
        sleep_until(w0 + (w1 - w0) / 4 * (uint64_t)q);
        rss_q_kb[q] = bench_proc_status_value(child, "VmRSS");
    }
    sleep_until(w1);
    double coord_cpu1 = bench_proc_cpu_s(child), self_cpu1 = bench_proc_cpu_s(getpid());
    long long hwm_kb = bench_proc_status_value(child, "VmHWM");
    long long coord_threads = bench_proc_status_value(child, "Threads");
    long long self_rss_kb = bench_proc_status_value(getpid(), "VmRSS");
    long fds = 0, fd_sockets = 0;
    bench_proc_fds(child, &fds, &fd_sockets);
    struct rlimit child_nofile;
    bool have_child_nofile = prlimit(child, RLIMIT_NOFILE, NULL, &child_nofile) == 0;
    sleep_until(w1 + GRACE_MS * 1000000ull);
    worker_census census;
    bench_list_workers(target, &census);
    atomic_store(&h.stop, 1);
    pthread_join(hb_thread, NULL);
    hb_started = false;
    char load_end[64];
    bench_read_loadavg(load_end, sizeof load_end);

    bench_figures f = {
        .argc = argc,
        .argv = argv,
        .child = child,
        .target = target,
        .control_endpoint = rep.control_endpoint,
        .load_start = load_start,
        .load_end = load_end,
        .reg_threads = nt,
        .reg_s = (double)(reg_end - reg_start) * 1e-9,
        .reg_lat = reg_lat,
        .n_lat = n_lat,
        .reg_failures = reg_failures,
        .reg_error = reg_error,
        .win_s = (double)(w1 - w0) * 1e-9,
        .rss_idle_kb = rss_idle_kb,
        .rss_reg_kb = rss_reg_kb,
        .hwm_kb = hwm_kb,
        .coord_threads = coord_threads,
        .self_rss_kb = self_rss_kb,
        .coord_cpu_s = coord_cpu1 - coord_cpu0,
        .self_cpu_s = self_cpu1 - self_cpu0,
        .fds = fds,
        .fd_sockets = fd_sockets,
        .nofile = have_child_nofile ? (long long)child_nofile.rlim_cur : -1,
        .census = census,
    };
    memcpy(f.rss_q_kb, rss_q_kb, sizeof f.rss_q_kb);
    bench_scan_coordinator_log(state_dir, &f.ls);
    status = bench_print_report(&h, &f) ? 0 : 1;

done:
    if (hb_started) {
        atomic_store(&h.stop, 1);
        pthread_join(hb_thread, NULL);
    }
    for (size_t i = 0; h.w && i < n; i++)
        sc_ctl_destroy(&h.w[i].ctl);
    if (h.zctx)
        zmq_ctx_term(h.zctx);
    if (h.epfd >= 0)
        close(h.epfd);
    free(h.w);
    free(h.rtt_ms);
    free(reg_lat);
    free(rt);
    bench_stop_child(child);
    if (o.keep_state)
        fprintf(stderr, "bench_control: state and coordinator log kept in %s\n", state_dir);
    else
        nftw(state_dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
    return status;
}
