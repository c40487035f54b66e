/*
 * bench_control_coord: the coordinator under test. It runs coord_new + coord_run in a forked
 * child so that its memory, CPU time and descriptors can be read on their own from /proc; the
 * parent reads its start-up report from a pipe, asks it ListWorkers at the end, scans the log it
 * writes (warnings and errors only) and stops it.
 *
 * Not here: the simulated workers' traffic (bench_control_workers.c), what is printed
 * (bench_control_report.c).
 *
 * Key invariant: the child dies with the parent (PR_SET_PDEATHSIG), so an aborted benchmark
 * leaves no coordinator behind.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench_control_internal.h"
#include "common/sc_clock.h"
#include "common/sc_log.h"
#include "common/sc_util.h"
#include "coordinator/coordinator.h"
#include "proto/sc_rpc.h"

static volatile sig_atomic_t child_stop;

static void child_on_signal(int sig)
{
    (void)sig;
    child_stop = 1;
}

/* Runs in the forked child: a coordinator on loopback until SIGTERM. Its log (warnings and
 * errors only) goes to STATE/coordinator.log, which the parent scans for liveness changes. */
int bench_coordinator_child(const bench_opts *o, pid_t parent, const char *state_dir,
                            const char *join_token, const char *client_token, int report_fd)
{
    /* An aborted benchmark must not leave a coordinator behind. */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
        return 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = child_on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    char log_path[1200];
    snprintf(log_path, sizeof log_path, "%s/coordinator.log", state_dir);
    int log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (log_fd >= 0) {
        dup2(log_fd, STDERR_FILENO);
        close(log_fd);
    }
    sc_log_set_level(SC_LOG_WARN);

    child_report rep;
    memset(&rep, 0, sizeof rep);
    if (o->coord_nofile > 0) {
        struct rlimit rl;
        getrlimit(RLIMIT_NOFILE, &rl);
        rl.rlim_cur = (rlim_t)o->coord_nofile;
        if (rl.rlim_cur > rl.rlim_max || setrlimit(RLIMIT_NOFILE, &rl) != 0) {
            snprintf(rep.error, sizeof rep.error,
                     "--coord-nofile %lld: cannot set the open-file limit (hard limit %llu)",
                     (long long)o->coord_nofile, (unsigned long long)rl.rlim_max);
            if (write(report_fd, &rep, sizeof rep) < 0)
                return 1;
            return 1;
        }
    }

    coord_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.listen_addr = "127.0.0.1:0";
    cfg.state_dir = state_dir;
    cfg.join_token = join_token;
    cfg.client_token = client_token;
    coord *c = NULL;
    sc_err err;
    sc_err_clear(&err);
    if (coord_new(&c, &cfg, &err) != SC_OK) {
        sc_strlcpy(rep.error, err.msg, sizeof rep.error);
        if (write(report_fd, &rep, sizeof rep) < 0)
            return 1;
        return 1;
    }
    rep.ok = 1;
    rep.port = coord_port(c);
    sc_strlcpy(rep.control_endpoint, coord_control_endpoint(c), sizeof rep.control_endpoint);
    bool told = write(report_fd, &rep, sizeof rep) == (ssize_t)sizeof rep;
    close(report_fd);
    sc_status rc = SC_OK;
    if (told)
        rc = coord_run(c, &child_stop, &err);
    coord_destroy(&c);
    return told && rc == SC_OK ? 0 : 1;
}

/* Waits up to timeout_ms for the child's report; false if it died or said nothing. */
bool bench_read_child_report(int fd, child_report *rep, int timeout_ms)
{
    size_t got = 0;
    uint64_t end = sc_clock_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    while (got < sizeof *rep) {
        uint64_t now = sc_clock_now_ns();
        if (now >= end)
            return false;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, (int)((end - now) / 1000000ull) + 1) <= 0)
            continue;
        ssize_t n = read(fd, (char *)rep + got, sizeof *rep - got);
        if (n <= 0)
            return false;
        got += (size_t)n;
    }
    return true;
}

void bench_stop_child(pid_t pid)
{
    kill(pid, SIGTERM);
    for (int i = 0; i < 200; i++) {
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return;
        sc_clock_sleep_ms(50);
    }
    fprintf(stderr, "bench_control: the coordinator did not stop within 10 s; killing it\n");
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* ---- /proc readings ------------------------------------------------------------------------ */

/* A "Key:   value kB" line of /proc/PID/status, as a number (kB for memory); -1 if absent. */
long long bench_proc_status_value(pid_t pid, const char *key)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    long long v = -1;
    size_t klen = strlen(key);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            v = strtoll(line + klen + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v;
}

/* utime + stime of a process, in seconds; -1 if unreadable. */
double bench_proc_cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name may hold spaces: fields are counted after its closing parenthesis,
     * where field 3 (state) starts; utime and stime are fields 14 and 15. */
    char *p = strrchr(buf, ')');
    if (p == NULL)
        return -1;
    unsigned long long ut = 0, st = 0;
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Open descriptors of a process, and how many of them are sockets. */
void bench_proc_fds(pid_t pid, long *total, long *sockets)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    *total = *sockets = -1;
    DIR *d = opendir(path);
    if (d == NULL)
        return;
    *total = *sockets = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char link_path[400], target[128];
        snprintf(link_path, sizeof link_path, "%s/%s", path, e->d_name);
        ssize_t n = readlink(link_path, target, sizeof target - 1);
        (*total)++;
        if (n > 0) {
            target[n] = '\0';
            if (strncmp(target, "socket:", 7) == 0)
                (*sockets)++;
        }
    }
    closedir(d);
    if (pid == getpid()) /* the directory stream itself */
        (*total)--;
}

void bench_read_loadavg(char *out, size_t size)
{
    out[0] = '\0';
    FILE *f = fopen("/proc/loadavg", "r");
    if (f == NULL)
        return;
    double a, b, c;
    if (fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3)
        snprintf(out, size, "%.2f %.2f %.2f", a, b, c);
    fclose(f);
}

/* ---- what the coordinator says at the end ---------------------------------------------------- */

void bench_list_workers(const char *target, worker_census *c)
{
    memset(c, 0, sizeof *c);
    sc_rpc_client *cli = NULL;
    sc_err err;
    sc_err_clear(&err);
    Stagecraft__ListWorkersRequest req = STAGECRAFT__LIST_WORKERS_REQUEST__INIT;
    ProtobufCMessage *m = NULL;
    if (sc_rpc_client_new(&cli, target, NULL, &err) != SC_OK ||
        sc_rpc_call(cli, "/stagecraft.Coordinator/ListWorkers", &req.base,
                    &stagecraft__list_workers_response__descriptor, &m, RPC_TIMEOUT_MS,
                    &err) != SC_OK) {
        sc_strlcpy(c->error, err.msg, sizeof c->error);
        sc_rpc_client_destroy(&cli);
        return;
    }
    Stagecraft__ListWorkersResponse *resp = (void *)m;
    c->total = resp->n_workers;
    for (size_t i = 0; i < resp->n_workers; i++) {
        switch (resp->workers[i]->state) {
        case STAGECRAFT__WORKER_STATE__WORKER_ALIVE:
            c->alive++;
            break;
        case STAGECRAFT__WORKER_STATE__WORKER_SUSPECT:
            c->suspect++;
            break;
        case STAGECRAFT__WORKER_STATE__WORKER_DEAD:
            c->dead++;
            break;
        default:
            c->other++;
            break;
        }
    }
    c->ok = true;
    protobuf_c_message_free_unpacked(m, NULL);
    sc_rpc_client_destroy(&cli);
}

void bench_scan_coordinator_log(const char *state_dir, log_scan *s)
{
    memset(s, 0, sizeof *s);
    char path[1200], line[2048];
    snprintf(path, sizeof path, "%s/coordinator.log", state_dir);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    while (fgets(line, sizeof line, f)) {
        s->warnings++;
        if (s->first[0] == '\0') {
            sc_strlcpy(s->first, line, sizeof s->first);
            s->first[strcspn(s->first, "\n")] = '\0';
        }
        if (strstr(line, " is suspect (was "))
            s->suspect++;
        if (strstr(line, " is dead (was "))
            s->dead++;
    }
    fclose(f);
}
