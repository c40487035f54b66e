/*
 * `stagecraft logs WORKER|JOB [--lines N] [--follow]`: the recent log lines of one worker, or of
 * every worker of a job, fetched through the coordinator (Coordinator.GetLogs), so that nobody
 * has to log in to each server.
 * Display: each worker's newest N lines, all of them printed in time order (by the timestamp
 * each line starts with), oldest first, so the newest line is the last one on screen, as `tail`
 * prints; each line is prefixed with its worker's id. --follow then prints new lines as they
 * come (asked for every second) until interrupted.
 * Contract: a worker that did not answer in time is named on stderr ("no lines from w-2: ...")
 * and the others are printed; exit 0 when any worker answered, 1 when none did.
 */
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "proto/sc_view.h"
#include "proto/stagecraft.pb-c.h"

#define LOGS_FOLLOW_POLL_MS 1000
#define LOGS_MAX_LINES 1000 /* what a worker keeps */
#define LOGS_MAX_WORKERS 1024

typedef struct {
    const char *target, *coordinator;
    long lines;
    int json, follow;
} logs_args;

/* What a follower remembers of one worker between polls. */
typedef struct {
    char id[64];
    uint64_t after_seq;
    bool failing;
} logs_cursor;

typedef struct {
    const char *worker_id;
    const char *text;
    size_t worker;
    uint64_t seq;
} logs_row;

static int parse_args(const cli_command *self, int argc, char **argv, logs_args *a)
{
    enum { O_LINES = 1, O_FOLLOW, O_COORD, O_JSON };
    static const struct option opts[] = {{"lines", required_argument, NULL, O_LINES},
                                         {"follow", no_argument, NULL, O_FOLLOW},
                                         {"coordinator", required_argument, NULL, O_COORD},
                                         {"json", no_argument, NULL, O_JSON},
                                         {NULL, 0, NULL, 0}};
    memset(a, 0, sizeof *a);
    a->lines = 50;
    int c;
    while ((c = cli_getopt(self, argc, argv, opts)) != -1) {
        char *end = NULL;
        switch (c) {
        case O_LINES:
            a->lines = strtol(optarg, &end, 10);
            if (end == optarg || *end != '\0' || a->lines < 1 || a->lines > LOGS_MAX_LINES)
                return cli_usage_error(self, "--lines '%s': expected a count from 1 to %d", optarg,
                                       LOGS_MAX_LINES);
            break;
        case O_FOLLOW:
            a->follow = 1;
            break;
        case O_JSON:
            a->json = 1;
            break;
        case O_COORD:
            a->coordinator = optarg;
            break;
        default: /* -2: cli_getopt printed the usage error */
            return CLI_USAGE;
        }
    }
    if (argc - optind != 1)
        return cli_usage_error(
            self, argc - optind == 0 ? "missing WORKER or JOB (a worker id or name, or a job id)"
                                     : "expected one WORKER or JOB");
    a->target = argv[optind];
    sc_err err;
    sc_err_clear(&err);
    if (cli_coordinator_addr(a->coordinator, &a->coordinator, &err) != SC_OK)
        return cli_report(self, &err);
    return CLI_OK;
}

/* Orders lines by their leading timestamp (ISO 8601 in UTC sorts as text), then by worker and
 * line number, so one worker's lines keep their order. */
static int row_cmp(const void *pa, const void *pb)
{
    const logs_row *a = pa, *b = pb;
    int t = strncmp(a->text, b->text, 24);
    if (t != 0)
        return t;
    if (a->worker != b->worker)
        return a->worker < b->worker ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* Prints the lines of `resp` in time order; names the workers that failed on stderr (once per
 * spell of failure when following). Returns how many workers answered. */
static size_t print_batch(const Stagecraft__GetLogsResponse *resp, bool json, logs_cursor *cur,
                          size_t *n_cur)
{
    size_t total = 0, answered = 0;
    for (size_t i = 0; i < resp->n_workers; i++)
        total += resp->workers[i]->n_lines;
    logs_row *rows = calloc(total ? total : 1, sizeof *rows);
    size_t n = 0;
    for (size_t i = 0; i < resp->n_workers; i++) {
        const Stagecraft__WorkerLog *w = resp->workers[i];
        logs_cursor *c = NULL;
        for (size_t k = 0; k < *n_cur && c == NULL; k++)
            if (strcmp(cur[k].id, w->worker_id) == 0)
                c = &cur[k];
        if (c == NULL && *n_cur < LOGS_MAX_WORKERS) {
            c = &cur[(*n_cur)++];
            snprintf(c->id, sizeof c->id, "%s", w->worker_id);
        }
        bool failed = w->error != NULL && w->error[0] != '\0';
        if (failed && (c == NULL || !c->failing))
            fprintf(stderr, "no lines from %s%s%s%s: %s\n", w->worker_id,
                    w->name && w->name[0] ? " (" : "", w->name ? w->name : "",
                    w->name && w->name[0] ? ")" : "", w->error);
        if (c != NULL)
            c->failing = failed;
        if (failed)
            continue;
        answered++;
        if (c != NULL)
            c->after_seq = w->newest_seq;
        for (size_t k = 0; rows != NULL && k < w->n_lines; k++)
            rows[n++] = (logs_row){w->worker_id, w->lines[k]->text, i, w->lines[k]->seq};
    }
    qsort(rows, n, sizeof *rows, row_cmp);
    for (size_t k = 0; k < n; k++) {
        if (json) {
            json_t *o = json_pack("{s:s, s:I, s:s}", "worker_id", rows[k].worker_id, "seq",
                                  (json_int_t)rows[k].seq, "text", rows[k].text);
            json_dumpf(o, stdout, JSON_COMPACT);
            printf("\n");
            json_decref(o);
        } else {
            printf("%s: %s\n", rows[k].worker_id, rows[k].text);
        }
    }
    fflush(stdout);
    free(rows);
    return answered;
}

/* One GetLogs call: the newest `lines` per worker, after the cursors. */
static sc_status fetch(const logs_args *a, const logs_cursor *cur, size_t n_cur,
                       Stagecraft__GetLogsResponse **resp, sc_err *err)
{
    Stagecraft__GetLogsRequest req = STAGECRAFT__GET_LOGS_REQUEST__INIT;
    req.target = (char *)a->target;
    req.lines = (uint32_t)a->lines;
    Stagecraft__LogCursor *after = calloc(n_cur ? n_cur : 1, sizeof *after);
    Stagecraft__LogCursor **ptrs = calloc(n_cur ? n_cur : 1, sizeof *ptrs);
    if (after == NULL || ptrs == NULL) {
        free(after);
        free(ptrs);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < n_cur; i++) {
        stagecraft__log_cursor__init(&after[i]);
        after[i].worker_id = (char *)cur[i].id;
        after[i].after_seq = cur[i].after_seq;
        ptrs[i] = &after[i];
    }
    req.after = ptrs;
    req.n_after = n_cur;
    ProtobufCMessage *m = NULL;
    sc_status rc = cli_call(a->coordinator, "/stagecraft.Coordinator/GetLogs", &req.base,
                            &stagecraft__get_logs_response__descriptor, &m, err);
    free(after);
    free(ptrs);
    *resp = (Stagecraft__GetLogsResponse *)m;
    return rc;
}

int cmd_logs(const cli_command *self, int argc, char **argv)
{
    logs_args a;
    int rc = parse_args(self, argc, argv, &a);
    if (rc != CLI_OK)
        return rc;
    sc_err err;
    sc_err_clear(&err);
    logs_cursor *cur = calloc(LOGS_MAX_WORKERS, sizeof *cur);
    size_t n_cur = 0;
    Stagecraft__GetLogsResponse *resp = NULL;
    if (cur == NULL || fetch(&a, cur, 0, &resp, &err) != SC_OK) {
        free(cur);
        return cli_report(self, &err);
    }
    size_t answered;
    if (a.json && !a.follow) {
        json_t *o = sc_view_logs(resp);
        json_object_set_new(o, "target", json_string(a.target));
        json_dumpf(o, stdout, JSON_INDENT(2));
        printf("\n");
        json_decref(o);
        answered = 0;
        for (size_t i = 0; i < resp->n_workers; i++) {
            const char *e = resp->workers[i]->error;
            if (e == NULL || e[0] == '\0')
                answered++;
            else
                fprintf(stderr, "no lines from %s: %s\n", resp->workers[i]->worker_id, e);
        }
    } else {
        answered = print_batch(resp, a.json, cur, &n_cur);
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    if (!a.follow) {
        free(cur);
        return answered > 0 ? CLI_OK : CLI_FAILURE;
    }
    static volatile sig_atomic_t stop;
    cli_on_stop_signals(&stop);
    while (!stop) {
        struct timespec ts = {LOGS_FOLLOW_POLL_MS / 1000, (LOGS_FOLLOW_POLL_MS % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        if (stop)
            break;
        sc_err_clear(&err);
        if (fetch(&a, cur, n_cur, &resp, &err) != SC_OK) {
            /* the coordinator may be restarting: say so and keep asking */
            fprintf(stderr, "stagecraft logs: %s\n", err.msg);
            continue;
        }
        print_batch(resp, a.json, cur, &n_cur);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    }
    free(cur);
    return CLI_OK;
}
