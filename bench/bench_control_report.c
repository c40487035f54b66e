/*
 * bench_control_report: prints bench_control's figures: registration rate and latency, the
 * heartbeat window's rates, round trips and losses, the coordinator's and this process's
 * resources, and the liveness verdict.
 *
 * Not here: taking the measurements (bench_control.c, bench_control_coord.c,
 * bench_control_workers.c).
 *
 * Key invariant: the run is called healthy only when every worker registered, is alive at the
 * end, never turned suspect or dead, and no reply was an error.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bench/bench_control_internal.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of a sorted array (p in 0..1). */
static double percentile(const double *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    size_t k = (size_t)(p * (double)n + 0.999999);
    if (k < 1)
        k = 1;
    if (k > n)
        k = n;
    return v[k - 1];
}

static void print_kb(const char *label, long long kb)
{
    if (kb < 0)
        printf("  %-34s unreadable\n", label);
    else
        printf("  %-34s %.1f MiB\n", label, (double)kb / 1024.0);
}

/* Prints the figures; returns whether the run was healthy (every worker registered and alive
 * throughout, no error reply). Sorts h->rtt_ms and f->reg_lat. */
bool bench_print_report(hb_loop *h, bench_figures *f)
{
    const size_t n = h->n;
    qsort(f->reg_lat, f->n_lat, sizeof *f->reg_lat, cmp_double);
    qsort(h->rtt_ms, h->n_rtt, sizeof *h->rtt_ms, cmp_double);
    uint64_t lost = h->sent_win > h->acked_win ? h->sent_win - h->acked_win : 0;
    double p99 = percentile(h->rtt_ms, h->n_rtt, 0.99);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);

    printf("stagecraft control-plane benchmark:");
    for (int i = 0; i < f->argc; i++)
        printf(" %s", f->argv[i]);
    printf("\nmachine: %ld online CPUs; load average %s at start, %s at end\n", cpus, f->load_start,
           f->load_end);
    printf("coordinator: child process %d, gRPC %s, control %s, log level warn\n", (int)f->child,
           f->target, f->control_endpoint);
    printf("workers: %zu simulated in this process (one DEALER each%s, one ZeroMQ context, one "
           "heartbeat thread on epoll)\n\n",
           n, h->w[0].server_key[0] ? " with CURVE" : ", plaintext");

    printf("phase 1: RegisterWorker over gRPC, %zu client threads (one channel each), "
           "registered workers already heartbeating\n",
           f->reg_threads);
    printf("  %-34s %zu ok, %zu failed\n", "registrations", n - f->reg_failures, f->reg_failures);
    printf("  %-34s %.3f s\n", "wall time (first call -> last reply)", f->reg_s);
    printf("  %-34s %.1f\n", "registrations/s", (double)n / f->reg_s);
    printf("  %-34s %.2f / %.2f / %.2f ms\n", "call latency p50 / p99 / max",
           percentile(f->reg_lat, f->n_lat, 0.5), percentile(f->reg_lat, f->n_lat, 0.99),
           f->n_lat ? f->reg_lat[f->n_lat - 1] : 0.0);
    if (f->reg_failures)
        printf("  first failure: %s\n", f->reg_error);

    printf("\nphase 2: heartbeats at 1 Hz per worker, spread evenly; window %.1f s after %d ms "
           "warm-up\n",
           f->win_s, WARMUP_MS);
    printf("  %-34s %llu (%.1f/s)\n", "heartbeats sent in window", (unsigned long long)h->sent_win,
           (double)h->sent_win / f->win_s);
    printf("  %-34s %llu (%.1f/s)\n", "acks received (handled)", (unsigned long long)h->acked_win,
           (double)h->acked_win / f->win_s);
    printf("  %-34s %llu (no ack by %d ms after the window; %llu send failures)\n",
           "lost heartbeats", (unsigned long long)lost, GRACE_MS,
           (unsigned long long)h->send_failures_win);
    printf("  %-34s %.3f / %.3f / %.3f ms\n", "round trip p50 / p99 / max",
           percentile(h->rtt_ms, h->n_rtt, 0.50), p99, h->n_rtt ? h->rtt_ms[h->n_rtt - 1] : 0.0);
    printf("  %-34s %.2f ms\n", "latest send after its due time", (double)h->max_lag_ns_win * 1e-6);
    printf("  (round trip: the heartbeat's sent_ns, stamped just before zmq_send, to the moment "
           "this process read the ack; same monotonic clock)\n");

    printf("\ncoordinator process (/proc/%d)\n", (int)f->child);
    print_kb("RSS after start, no workers", f->rss_idle_kb);
    print_kb("RSS right after last registration", f->rss_reg_kb);
    printf("  %-34s", "RSS at 0, 1/4 .. 4/4 of window");
    for (int q = 0; q <= 4; q++)
        printf(" %.1f", (double)f->rss_q_kb[q] / 1024.0);
    printf(" MiB\n");
    print_kb("peak RSS (VmHWM)", f->hwm_kb);
    printf("  %-34s %.1f%% of one core (%.2f s in %.1f s)\n", "CPU during window",
           100.0 * f->coord_cpu_s / f->win_s, f->coord_cpu_s, f->win_s);
    printf("  %-34s %lld\n", "threads", f->coord_threads);
    printf("  %-34s %ld (%ld sockets); soft limit %lld\n", "open descriptors", f->fds,
           f->fd_sockets, f->nofile);

    printf("\nbenchmark process (the simulated workers)\n");
    print_kb("RSS at end of window", f->self_rss_kb);
    printf("  %-34s %.1f%% of one core\n", "CPU during window", 100.0 * f->self_cpu_s / f->win_s);

    const worker_census *c = &f->census;
    printf("\nliveness\n");
    if (c->ok)
        printf("  %-34s %zu workers: %zu alive, %zu suspect, %zu dead\n", "ListWorkers at end",
               c->total, c->alive, c->suspect, c->dead);
    else
        printf("  %-34s failed: %s\n", "ListWorkers at end", c->error);
    printf("  %-34s %zu suspect, %zu dead (%zu warning lines)\n", "transitions in coordinator log",
           f->ls.suspect, f->ls.dead, f->ls.warnings);
    printf("  %-34s %llu unknown-worker acks, %llu errors, %llu other, %llu unreadable, "
           "%llu connect failures\n",
           "replies (whole run)", (unsigned long long)h->unknown_acks,
           (unsigned long long)h->error_replies, (unsigned long long)h->other_msgs,
           (unsigned long long)h->recv_errors, (unsigned long long)h->setup_failures);
    if (f->ls.first[0])
        printf("  first coordinator warning: %s\n", f->ls.first);
    if (h->first_problem[0])
        printf("  first problem seen by the workers: %s\n", h->first_problem);

    bool healthy = f->reg_failures == 0 && c->ok && c->total == n && c->alive == n &&
                   f->ls.suspect == 0 && f->ls.dead == 0 && h->unknown_acks == 0 &&
                   h->error_replies == 0 && h->setup_failures == 0;
    printf("\nresult: %s", healthy ? "healthy" : "NOT healthy (see above)");
    if (n == 1000)
        printf("; goal (1000 workers at 1 Hz, p99 < 20 ms): %s (p99 %.3f ms, %ld CPUs)",
               p99 < 20.0 && lost == 0 && healthy ? "met" : "not met", p99, cpus);
    printf("\n");
    return healthy;
}
