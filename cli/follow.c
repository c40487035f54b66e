/* Following a job: see follow.h. */
#include "cli/follow.h"

#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/client.h"
#include "common/sc_clock.h"

#define POLL_MS 500
#define UNREACHABLE_S 60.0 /* a coordinator restart takes seconds; beyond this, give up */
#define BAR_WIDTH 20

static volatile sig_atomic_t stop_flag;

/* What the follower has seen: the transitions printed, and the step rate since it last saw the
 * job start running (for the ETA). */
typedef struct {
    bool json, tty;
    double progress_every_s, last_progress_s;
    size_t n_printed; /* transitions printed */
    bool line_open;   /* a progress line is on the terminal, not yet ended */
    double rate_t0_s; /* when the rate's first step was seen (0: not running) */
    uint64_t rate_step0;
} follower;

static bool is_final(Stagecraft__JobState s)
{
    return s == STAGECRAFT__JOB_STATE__JOB_SUCCEEDED || s == STAGECRAFT__JOB_STATE__JOB_FAILED ||
           s == STAGECRAFT__JOB_STATE__JOB_CANCELLED;
}

/* Ends the progress line on a terminal so that the next output starts on a line of its own. */
static void close_line(follower *f)
{
    if (f->line_open) {
        printf("\r\033[K");
        f->line_open = false;
    }
}

static void print_transitions(follower *f, const Stagecraft__JobInfo *j)
{
    if (j->n_transitions < f->n_printed)
        f->n_printed = 0; /* a coordinator restored from older state: print again */
    int64_t t0 = j->n_transitions ? j->transitions[0]->at_unix_ms : 0;
    for (size_t i = f->n_printed; i < j->n_transitions; i++) {
        const Stagecraft__JobTransition *t = j->transitions[i];
        double at = (double)(t->at_unix_ms - t0) / 1000.0;
        if (f->json) {
            json_t *o = json_pack("{s:s, s:s, s:s, s:f}", "job_id", j->job_id, "state", t->to_state,
                                  "reason", t->reason, "at_s", at);
            char *s = json_dumps(o, JSON_COMPACT);
            printf("%s\n", s ? s : "{}");
            free(s);
            json_decref(o);
        } else {
            close_line(f);
            printf("%+9.3f s  %-11s %s\n", at, t->to_state, t->reason);
        }
        /* a (re)start of training restarts the rate: recovery and profiling are not steps */
        if (strcmp(t->to_state, "running") == 0)
            f->rate_t0_s = 0;
    }
    f->n_printed = j->n_transitions;
}

/* "1h02m", "3m07s", "12s" */
static void format_eta(double s, char *out, size_t cap)
{
    long v = (long)(s + 0.5);
    if (v >= 3600)
        snprintf(out, cap, "%ldh%02ldm", v / 3600, v / 60 % 60);
    else if (v >= 60)
        snprintf(out, cap, "%ldm%02lds", v / 60, v % 60);
    else
        snprintf(out, cap, "%lds", v);
}

static void print_progress(follower *f, const Stagecraft__JobInfo *j, double now_s)
{
    if (j->state != STAGECRAFT__JOB_STATE__JOB_RUNNING || j->steps == 0)
        return;
    if (f->rate_t0_s == 0) {
        f->rate_t0_s = now_s;
        f->rate_step0 = j->step;
    }
    double eta_s = -1;
    if (j->step > f->rate_step0 && now_s > f->rate_t0_s)
        eta_s = (double)(j->steps - j->step) * (now_s - f->rate_t0_s) /
                (double)(j->step - f->rate_step0);
    if (!f->tty && now_s - f->last_progress_s < f->progress_every_s)
        return;
    f->last_progress_s = now_s;
    if (f->json) {
        json_t *o =
            json_pack("{s:s, s:s, s:I, s:I, s:o, s:o, s:f}", "job_id", j->job_id, "state",
                      "running", "step", (json_int_t)j->step, "steps", (json_int_t)j->steps, "loss",
                      cli_json_figure(j->loss_known, j->loss), "samples_per_s",
                      cli_json_figure(j->samples_per_s_known, j->samples_per_s), "eta_s", eta_s);
        char *s = json_dumps(o, JSON_COMPACT);
        printf("%s\n", s ? s : "{}");
        free(s);
        json_decref(o);
        return;
    }
    char bar[BAR_WIDTH + 1], eta[32] = "?";
    int filled = (int)((double)BAR_WIDTH * (double)j->step / (double)j->steps);
    for (int i = 0; i < BAR_WIDTH; i++)
        bar[i] = i < filled ? '#' : '-';
    bar[BAR_WIDTH] = '\0';
    if (eta_s >= 0)
        format_eta(eta_s, eta, sizeof eta);
    char loss[32], rate[32];
    cli_fmt_figure(loss, sizeof loss, j->loss_known, "%.4f", j->loss);
    cli_fmt_figure(rate, sizeof rate, j->samples_per_s_known, "%.1f", j->samples_per_s);
    printf("%sstep %llu/%llu [%s] %3.0f%%  loss %s  %s samples/s  ETA %s%s",
           f->tty ? "\r\033[K" : "", (unsigned long long)j->step, (unsigned long long)j->steps, bar,
           100.0 * (double)j->step / (double)j->steps, loss, rate, eta, f->tty ? "" : "\n");
    f->line_open = f->tty;
}

int cli_follow_job(const char *addr, const char *job_id, bool json, double progress_every_s,
                   sc_err *err)
{
    follower f = {.json = json,
                  .tty = !json && isatty(STDOUT_FILENO) == 1,
                  .progress_every_s = progress_every_s,
                  .last_progress_s = -1e9};
    stop_flag = 0;
    cli_on_stop_signals(&stop_flag);
    double unreachable_since = 0;
    while (!stop_flag) {
        Stagecraft__GetJobRequest req = STAGECRAFT__GET_JOB_REQUEST__INIT;
        req.job_id = (char *)job_id;
        ProtobufCMessage *m = NULL;
        sc_err call_err;
        sc_err_clear(&call_err);
        sc_status rc = cli_call(addr, "/stagecraft.Coordinator/GetJob", &req.base,
                                &stagecraft__get_job_response__descriptor, &m, &call_err);
        double now = sc_clock_now_s();
        if (rc == SC_ERR_UNAVAILABLE || rc == SC_ERR_TIMEOUT) {
            if (unreachable_since == 0) {
                unreachable_since = now;
                close_line(&f);
                fprintf(stderr,
                        "stagecraft: the coordinator is unreachable (%s); retrying for "
                        "%.0f s\n",
                        call_err.msg, UNREACHABLE_S);
            } else if (now - unreachable_since > UNREACHABLE_S) {
                close_line(&f);
                *err = call_err;
                return 1;
            }
            sc_clock_sleep_ms(POLL_MS);
            continue;
        }
        if (rc != SC_OK) {
            close_line(&f);
            *err = call_err;
            return 1;
        }
        unreachable_since = 0;
        const Stagecraft__JobInfo *j = ((Stagecraft__GetJobResponse *)m)->job;
        print_transitions(&f, j);
        bool done = is_final(j->state);
        bool ok = j->state == STAGECRAFT__JOB_STATE__JOB_SUCCEEDED;
        if (!done)
            print_progress(&f, j, now);
        else
            close_line(&f);
        fflush(stdout);
        protobuf_c_message_free_unpacked(m, NULL);
        if (done)
            return ok ? 0 : 1;
        sc_clock_sleep_ms(POLL_MS);
    }
    close_line(&f);
    fflush(stdout);
    SC_ERRF(err, SC_ERR_CANCELLED, "stopped following %s (the job goes on)", job_id);
    return 1;
}
