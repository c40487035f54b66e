/*
 * `stagecraft demo`: a whole cluster on this machine. Starts a coordinator and N workers as
 * child processes of this binary, submits a small GPT trained on a text file with a planned
 * N-stage pipeline, shows progress as it trains, and ends with a summary (loss curve, plan,
 * predicted vs measured iteration time). Then, with a Hugging Face checkpoint folder (by default
 * the repository's tiny Llama), fine-tunes it on the same cluster and exports the result
 * (demo_finetune.h). Everything it starts is stopped on exit, also on Ctrl-C.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/client.h"
#include "cli/commands.h"
#include "cli/demo_finetune.h"
#include "common/sc_clock.h"
#include "common/sc_util.h"
#include "kernels/device.h"
#include "kernels/threads_cpu.h"

#define DEMO_MAX_WORKERS 16
#define DEMO_DEFAULT_DATA "/usr/share/common-licenses/GPL-3"
#define DEMO_SEQ_LEN 64 /* the GPT's context: a sample is DEMO_SEQ_LEN + 1 bytes of --data */

typedef struct {
    pid_t pids[DEMO_MAX_WORKERS + 1];
    int n;
    char dir[64];
} demo_procs;

static pid_t spawn(demo_procs *p, const char *log, char *const argv[])
{
    pid_t pid = fork();
    if (pid == 0) {
        FILE *f = fopen(log, "w");
        if (f) {
            dup2(fileno(f), 1);
            dup2(fileno(f), 2);
        }
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    if (pid > 0)
        p->pids[p->n++] = pid;
    return pid;
}

static void stop_all(demo_procs *p)
{
    for (int i = p->n - 1; i >= 0; i--)
        kill(p->pids[i], SIGTERM);
    for (int i = p->n - 1; i >= 0; i--) {
        uint64_t end = sc_clock_now_ns() + 5000000000ull;
        while (waitpid(p->pids[i], NULL, WNOHANG) == 0) {
            if (sc_clock_now_ns() > end) {
                kill(p->pids[i], SIGKILL);
                waitpid(p->pids[i], NULL, 0);
                break;
            }
            sc_clock_sleep_ms(20);
        }
    }
    p->n = 0;
}

/* The port in the coordinator's log's last line of the form `fmt` ("... port %d ..."), or 0. */
static int port_in_log(const char *log, const char *fmt)
{
    FILE *f = fopen(log, "r");
    char line[256];
    int port = 0;
    while (f && fgets(line, sizeof line, f))
        sscanf(line, fmt, &port);
    if (f)
        fclose(f);
    return port;
}

/* Waits for "coordinator listening on port N" in the coordinator's log. */
static int wait_for_port(const char *log, volatile sig_atomic_t *stop)
{
    for (int tries = 0; tries < 200 && !*stop; tries++) {
        int port = port_in_log(log, "coordinator listening on port %d");
        if (port > 0)
            return port;
        sc_clock_sleep_ms(50);
    }
    return 0;
}

static char *read_token(const char *dir, const char *name)
{
    char path[256], *text = NULL;
    size_t len;
    snprintf(path, sizeof path, "%s/state/%s", dir, name);
    if (sc_file_read(path, 256, &text, &len, NULL) != SC_OK)
        return NULL;
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == ' '))
        text[--len] = '\0';
    return text;
}

/* The job as `stagecraft status --json` would print it; NULL when the call fails. */
static json_t *get_job(const char *addr, const char *job_id)
{
    Stagecraft__GetJobRequest req = STAGECRAFT__GET_JOB_REQUEST__INIT;
    req.job_id = (char *)job_id;
    ProtobufCMessage *m = NULL;
    sc_err err;
    sc_err_clear(&err);
    if (cli_call(addr, "/stagecraft.Coordinator/GetJob", &req.base,
                 &stagecraft__get_job_response__descriptor, &m, &err) != SC_OK)
        return NULL;
    Stagecraft__JobInfo *j = ((Stagecraft__GetJobResponse *)m)->job;
    json_t *o =
        json_pack("{s:i, s:s, s:I, s:I, s:o, s:o, s:f, s:f}", "state", (int)j->state, "reason",
                  j->reason ? j->reason : "", "step", (json_int_t)j->step, "steps",
                  (json_int_t)j->steps, "loss", cli_json_figure(j->loss_known, j->loss),
                  "samples_per_s", cli_json_figure(j->samples_per_s_known, j->samples_per_s),
                  "measured_s", j->measured_iteration_s, "predicted_s", j->predicted_iteration_s);
    if (j->plan_json && j->plan_json[0])
        json_object_set_new(o, "plan", json_loads(j->plan_json, 0, NULL));
    protobuf_c_message_free_unpacked(m, NULL);
    return o;
}

static const char *state_name(int s)
{
    static const char *const names[] = {"?",         "submitted",  "profiling", "planned",
                                        "running",   "recovering", "succeeded", "failed",
                                        "cancelled", "rebalancing"};
    return s >= 0 && s < (int)SC_ARRAY_LEN(names) ? names[s] : "?";
}

int cmd_demo(const cli_command *self, int argc, char **argv)
{
    enum {
        O_WORKERS = 1,
        O_STEPS,
        O_DATA,
        O_DEVICE,
        O_KEEP,
        O_FINETUNE,
        O_FINETUNE_STEPS,
        O_CPU_KERNELS
    };
    static const struct option opts[] = {
        {"workers", required_argument, NULL, O_WORKERS},
        {"steps", required_argument, NULL, O_STEPS},
        {"data", required_argument, NULL, O_DATA},
        {"device", required_argument, NULL, O_DEVICE},
        {"keep", no_argument, NULL, O_KEEP},
        {"finetune", required_argument, NULL, O_FINETUNE},
        {"finetune-steps", required_argument, NULL, O_FINETUNE_STEPS},
        {"cpu-kernels", required_argument, NULL, O_CPU_KERNELS},
        {NULL, 0, NULL, 0},
    };
    int64_t workers = 4, steps = 300, ft_steps = 500;
    const char *data = DEMO_DEFAULT_DATA, *device = "auto", *finetune = NULL, *cpu_kernels = "fast";
    char ft_dir[PATH_MAX];
    int keep = 0, c;
    json_t *last = NULL; /* the job's last status */
    sc_err err;
    sc_err_clear(&err);
    while ((c = cli_getopt(self, argc, argv, opts)) != -1) {
        switch (c) {
        case -2:
            return CLI_USAGE;
        case O_WORKERS:
            if (sc_parse_int64(optarg, 2, DEMO_MAX_WORKERS, "--workers", &workers, &err) != SC_OK)
                return cli_report(self, &err);
            break;
        case O_STEPS:
            if (sc_parse_int64(optarg, 1, 1000000, "--steps", &steps, &err) != SC_OK)
                return cli_report(self, &err);
            break;
        case O_DATA:
            data = optarg;
            break;
        case O_DEVICE:
            device = optarg;
            break;
        case O_KEEP:
            keep = 1;
            break;
        case O_FINETUNE:
            finetune = optarg;
            break;
        case O_CPU_KERNELS:
            if (strcmp(optarg, "fast") != 0 && strcmp(optarg, "reference") != 0)
                return cli_usage_error(self, "--cpu-kernels '%s': expected fast or reference",
                                       optarg);
            cpu_kernels = optarg;
            break;
        case O_FINETUNE_STEPS:
            if (sc_parse_int64(optarg, 1, 1000000, "--finetune-steps", &ft_steps, &err) != SC_OK)
                return cli_report(self, &err);
            break;
        }
    }
    if (optind < argc)
        return cli_usage_error(self, "unexpected argument '%s'", argv[optind]);
    /* The workers would find out only after the cluster started and the model was profiled;
     * a FIFO would block them. */
    struct stat sb;
    if (access(data, R_OK) != 0 || stat(data, &sb) != 0)
        return cli_usage_error(self, "--data %s: %s (any readable text file will do)", data,
                               strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return cli_usage_error(
            self, "--data %s: not a regular file (any readable text file will do)", data);
    if (sb.st_size < DEMO_SEQ_LEN + 1)
        return cli_usage_error(self,
                               "--data %s: %lld bytes, fewer than one sample of the demo's GPT "
                               "needs (%d); any text file of at least %d bytes will do",
                               data, (long long)sb.st_size, DEMO_SEQ_LEN + 1, DEMO_SEQ_LEN + 1);
    if (finetune == NULL)
        finetune = demo_finetune_default(ft_dir, sizeof ft_dir) ? ft_dir : "none";
    else if (strcmp(finetune, "none") != 0) {
        /* the job names it to the workers, which run elsewhere than this folder */
        char cfg_path[PATH_MAX + 16];
        snprintf(cfg_path, sizeof cfg_path, "%s/config.json", finetune);
        if (realpath(finetune, ft_dir) == NULL || access(cfg_path, R_OK) != 0)
            return cli_usage_error(self,
                                   "--finetune %s: not a Hugging Face checkpoint folder "
                                   "(config.json and model.safetensors), or none",
                                   finetune);
        finetune = ft_dir;
    }
    int gpus = kn_cuda_device_count();
    if (strcmp(device, "auto") == 0)
        device = gpus > 0 ? "cuda" : "cpu";
    if (strcmp(device, "cuda") == 0 && gpus == 0)
        return cli_usage_error(self, "--device cuda: this machine has no CUDA device");
    if (strcmp(device, "cpu") != 0 && strcmp(device, "cuda") != 0)
        return cli_usage_error(self, "--device '%s': expected auto, cpu or cuda", device);

    static volatile sig_atomic_t stop;
    cli_on_stop_signals(&stop);
    demo_procs procs;
    memset(&procs, 0, sizeof procs);
    strcpy(procs.dir, "/tmp/stagecraft-demo-XXXXXX");
    if (mkdtemp(procs.dir) == NULL)
        return cli_usage_error(self, "cannot create a scratch folder in /tmp: %s", strerror(errno));
    int rc = CLI_FAILURE;
    char *token = NULL; /* the client token, once the coordinator wrote it */

    char log[128], state[96];
    snprintf(log, sizeof log, "%s/coordinator.log", procs.dir);
    snprintf(state, sizeof state, "%s/state", procs.dir);
    char *cargv[] = {"stagecraft", "coordinator",    "--listen", "127.0.0.1:0", "--state",
                     state,        "--heartbeat-ms", "500",      NULL};
    spawn(&procs, log, cargv);
    int port = wait_for_port(log, &stop);
    if (port == 0) {
        fprintf(stderr, "stagecraft demo: the coordinator did not start; see %s\n", log);
        goto out;
    }
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    char *join = read_token(procs.dir, "join.token");
    token = read_token(procs.dir, "client.token");
    if (join == NULL || token == NULL) {
        free(join);
        fprintf(stderr, "stagecraft demo: no tokens in %s\n", state);
        goto out;
    }
    setenv("STAGECRAFT_JOIN_TOKEN", join, 1);
    free(join);
    printf("stagecraft demo: coordinator on %s, %lld %s workers, scratch folder %s\n", addr,
           (long long)workers, device, procs.dir);
    /* printed with the listening line; absent when the default port was taken */
    int http = port_in_log(log, "dashboard and metrics on http port %d");
    if (http > 0)
        printf("stagecraft demo: dashboard at http://127.0.0.1:%d/ (metrics at /metrics)\n", http);
    for (int i = 0; i < workers; i++) {
        char name[32], dev[32], wlog[128];
        snprintf(name, sizeof name, "demo-%d", i);
        if (strcmp(device, "cuda") == 0)
            snprintf(dev, sizeof dev, "cuda:%d", i % gpus);
        else
            snprintf(dev, sizeof dev, "cpu");
        snprintf(wlog, sizeof wlog, "%s/worker-%d.log", procs.dir, i);
        /* CPU workers share this machine's cores: each gets its part as kernel threads */
        int per = kn_cpu_cores_available() / (int)workers;
        char threads[16];
        snprintf(threads, sizeof threads, "%d", per > 0 ? per : 1);
        char *wargv[] = {"stagecraft", "worker", "--coordinator", addr,  "--name",    name,
                         "--device",   dev,      "--state",       state, "--threads", threads,
                         NULL};
        spawn(&procs, wlog, wargv);
    }

    /* the job: a small GPT on the bytes of a text file, cut into at most N pipeline stages (one
     * per worker) by the exhaustive search over contiguous partitions and placements */
    char job_path[128];
    snprintf(job_path, sizeof job_path, "%s/job.json", procs.dir);
    json_t *job = json_pack(
        "{s:s, s:i, s:s, s:{s:s, s:i, s:i, s:i, s:i, s:i}, s:{s:s, s:s}, s:i, s:s, s:s, s:s,"
        " s:I, s:I, s:I, s:i, s:{s:s, s:f, s:f}, s:I}",
        "format", "stagecraft-job", "version", 1, "name", "demo-gpt", "model", "kind", "gpt",
        "vocab", 256, "seq_len", DEMO_SEQ_LEN, "layers", 4 > workers ? 4 : (int)workers, "width",
        128, "heads", 4, "data", "kind", "text", "path", data, "batch_size", 16, "microbatches",
        "auto", "schedule", "1f1b", "strategy", "exhaustive", "workers", (json_int_t)workers,
        "stages", (json_int_t)workers, "steps", (json_int_t)steps, "seed", 1, "optimizer", "kind",
        "adamw", "lr", 1e-3, "weight_decay", 0.0, "checkpoint_every",
        (json_int_t)(steps / 4 > 0 ? steps / 4 : 1));
    json_object_set_new(json_object_get(job, "model"), "cpu_kernels", json_string(cpu_kernels));
    json_dump_file(job, job_path, JSON_INDENT(2));
    char *job_text = json_dumps(job, 0);
    json_decref(job);
    Stagecraft__SubmitJobRequest req = STAGECRAFT__SUBMIT_JOB_REQUEST__INIT;
    Stagecraft__Header hdr = STAGECRAFT__HEADER__INIT;
    hdr.token = token;
    req.header = &hdr;
    req.job_json = job_text;
    ProtobufCMessage *m = NULL;
    sc_status s = cli_call(addr, "/stagecraft.Coordinator/SubmitJob", &req.base,
                           &stagecraft__submit_job_response__descriptor, &m, &err);
    free(job_text);
    if (s != SC_OK) {
        cli_report(self, &err);
        goto out;
    }
    char job_id[64];
    sc_strlcpy(job_id, ((Stagecraft__SubmitJobResponse *)m)->job_id, sizeof job_id);
    protobuf_c_message_free_unpacked(m, NULL);
    printf("submitted %s (%s): GPT, 4 layers of width 128, on the bytes of %s\n", job_id, job_path,
           data);

    /* progress, once a second; the loss curve is kept for the summary */
    enum { CURVE_MAX = 4096, CURVE_SHOWN = 12 };
    static double curve_loss[CURVE_MAX];
    static long long curve_step[CURVE_MAX];
    int curve_n = 0, last_state = -1;
    long long last_step = -1;
    while (!stop) {
        json_decref(last);
        last = get_job(addr, job_id);
        if (last == NULL) {
            fprintf(stderr, "stagecraft demo: lost the coordinator; see %s\n", log);
            goto out;
        }
        int st = (int)json_integer_value(json_object_get(last, "state"));
        long long step = json_integer_value(json_object_get(last, "step"));
        /* null until measured: shown as "-" and kept out of the loss curve */
        bool loss_known = json_is_number(json_object_get(last, "loss"));
        double loss = json_number_value(json_object_get(last, "loss"));
        json_t *rate_j = json_object_get(last, "samples_per_s");
        bool ended = st == 6 || st == 7 || st == 8;
        if (st != last_state && !ended)
            printf("[%s] %s\n", state_name(st), json_string_value(json_object_get(last, "reason")));
        /* running, or just succeeded: the last step's figures may come with the final state,
         * so they are printed before the line that ends the job */
        if ((st == 4 || st == 6) && step != last_step && step > 0) {
            char loss_s[32], rate_s[32];
            cli_fmt_figure(loss_s, sizeof loss_s, loss_known, "%.4f", loss);
            cli_fmt_figure(rate_s, sizeof rate_s, json_is_number(rate_j), "%.1f",
                           json_number_value(rate_j));
            printf("step %5lld/%lld  loss %s  %s samples/s\n", step, (long long)steps, loss_s,
                   rate_s);
            if (loss_known && curve_n < CURVE_MAX) {
                curve_step[curve_n] = step;
                curve_loss[curve_n++] = loss;
            }
        }
        if (st != last_state && ended)
            printf("[%s] %s\n", state_name(st), json_string_value(json_object_get(last, "reason")));
        fflush(stdout);
        last_state = st;
        last_step = step;
        if (ended)
            break;
        sc_clock_sleep_ms(1000);
    }
    if (stop) {
        printf("interrupted\n");
        goto out;
    }
    printf("\nsummary\n");
    json_t *plan = json_object_get(last, "plan");
    if (json_is_object(plan)) {
        printf("  plan: %s, %zu stages, %lld micro-batches\n",
               json_string_value(json_object_get(plan, "strategy")),
               json_array_size(json_object_get(plan, "stages")),
               (long long)json_integer_value(
                   json_object_get(json_object_get(plan, "microbatches"), "count")));
        const char *note = json_string_value(json_object_get(plan, "note"));
        if (note)
            printf("  note: %s\n", note);
        size_t i;
        json_t *stg;
        json_array_foreach(json_object_get(plan, "stages"), i, stg)
            printf("    stage %zu: blocks %lld-%lld on %s\n", i,
                   (long long)json_integer_value(json_object_get(stg, "first_block")),
                   (long long)json_integer_value(json_object_get(stg, "last_block")),
                   json_string_value(json_array_get(json_object_get(stg, "worker_ids"), 0)));
    }
    printf("  iteration time: predicted %.4g s, measured %.4g s\n",
           json_number_value(json_object_get(last, "predicted_s")),
           json_number_value(json_object_get(last, "measured_s")));
    /* Here the workers may share processors; the coordinator tells the planner so
     * (compute_slots), and its prediction shares them among the stages computing at once. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (strcmp(device, "cuda") == 0 && workers > gpus)
        printf("  (the %lld workers share %d GPU%s; the prediction shares %s among the stages "
               "that compute at once)\n",
               (long long)workers, gpus, gpus == 1 ? "" : "s", gpus == 1 ? "it" : "them");
    else if (strcmp(device, "cuda") != 0 && cores > 0 && workers > cores)
        printf("  (the %lld workers share this machine's %ld cores; the prediction shares them "
               "among the stages that compute at once)\n",
               (long long)workers, cores);
    /* the loss curve: a dozen points spread over the run, first and last included */
    printf("  loss curve (step:loss):");
    int shown = curve_n < CURVE_SHOWN ? curve_n : CURVE_SHOWN;
    for (int k = 0; k < shown; k++) {
        int i = shown == 1 ? 0 : (int)((long long)k * (curve_n - 1) / (shown - 1));
        printf(" %lld:%.3f", curve_step[i], curve_loss[i]);
    }
    printf("\n  result: %s (%s)\n", state_name(last_state),
           json_string_value(json_object_get(last, "reason")));
    rc = last_state == 6 ? CLI_OK : CLI_FAILURE;
    if (rc == CLI_OK && strcmp(finetune, "none") != 0) {
        demo_finetune_cfg ft = {.addr = addr,
                                .token = token,
                                .scratch = procs.dir,
                                .checkpoint = finetune,
                                .text = data,
                                .cpu_kernels = cpu_kernels,
                                .stages = 2,
                                .steps = (int)ft_steps};
        rc = demo_finetune(&ft, &stop) == 0 ? CLI_OK : CLI_FAILURE;
    } else if (rc == CLI_OK) {
        printf("\n(no Hugging Face checkpoint folder to fine-tune: --finetune DIR shows it)\n");
    }
out:
    free(token);
    json_decref(last);
    stop_all(&procs);
    if (keep || rc != CLI_OK) {
        printf("logs kept in %s\n", procs.dir);
    } else {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", procs.dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", procs.dir);
    }
    return rc;
}
