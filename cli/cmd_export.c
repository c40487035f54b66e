/*
 * `stagecraft export`: writes a trained model as a Hugging Face checkpoint folder (config.json +
 * model.safetensors, what transformers' from_pretrained loads), either from a job of the
 * coordinator (export JOB: its checkpoint's blocks fetched from the workers, export_job.h) or
 * from stage checkpoint files gathered in one folder (--model and --checkpoints). Parsing and
 * output only; the work is export_job.c and worker/runtime/export_hf.
 */
#include <stdio.h>
#include <string.h>

#include "cli/client.h"
#include "cli/commands.h"
#include "cli/export_job.h"
#include "common/sc_util.h"
#include "kernels/model.h"
#include "worker/runtime/export_hf.h"

#define EXPORT_TIMEOUT_MS 10000 /* a block server silent this long is skipped */

typedef struct {
    const char *job, *model, *checkpoints, *out, *coordinator, *token_file;
    int64_t step, timeout_ms;
    bool json;
} export_args;

static int parse_args(const cli_command *self, int argc, char **argv, export_args *a)
{
    memset(a, 0, sizeof *a);
    a->timeout_ms = EXPORT_TIMEOUT_MS;
    sc_err err;
    sc_err_clear(&err);
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(f, "--json") == 0) {
            a->json = true;
            continue;
        }
        if (strncmp(f, "--", 2) != 0) {
            if (a->job != NULL)
                return cli_usage_error(self, "unexpected argument '%s' (one JOB at most)", f);
            a->job = f;
            continue;
        }
        if (v == NULL)
            return cli_usage_error(self, "unknown argument or missing value: '%s'", f);
        if (strcmp(f, "--model") == 0)
            a->model = v;
        else if (strcmp(f, "--checkpoints") == 0)
            a->checkpoints = v;
        else if (strcmp(f, "--out") == 0)
            a->out = v;
        else if (strcmp(f, "--coordinator") == 0)
            a->coordinator = v;
        else if (strcmp(f, "--token-file") == 0)
            a->token_file = v;
        else if (strcmp(f, "--step") == 0) {
            if (sc_parse_int64(v, 1, INT64_MAX, "--step", &a->step, &err) != SC_OK)
                return cli_usage_error(self, "%s", err.msg);
        } else if (strcmp(f, "--timeout-ms") == 0) {
            if (sc_parse_int64(v, 100, 3600000, "--timeout-ms", &a->timeout_ms, &err) != SC_OK)
                return cli_usage_error(self, "%s", err.msg);
        } else
            return cli_usage_error(self, "unknown argument '%s'", f);
        i++;
    }
    if (a->out == NULL)
        return cli_usage_error(self, "--out DIR is required");
    if (a->job != NULL && (a->model != NULL || a->checkpoints != NULL))
        return cli_usage_error(self, "give a JOB, or --model SPEC and --checkpoints DIR, not both");
    if (a->job == NULL && (a->model == NULL || a->checkpoints == NULL))
        return cli_usage_error(self,
                               "give a JOB of the coordinator, or --model SPEC and --checkpoints "
                               "DIR (stage checkpoint files gathered in one folder)");
    if (a->job == NULL && (a->coordinator != NULL || a->token_file != NULL))
        return cli_usage_error(self, "--coordinator and --token-file go with a JOB");
    return CLI_OK;
}

static void print_done(const export_args *a, const char *model, uint64_t step, double bytes)
{
    if (a->json)
        printf("{\"out\": \"%s\", \"step\": %llu, \"model\": \"%s\"%s%s%s}\n", a->out,
               (unsigned long long)step, model, a->job ? ", \"job\": \"" : "", a->job ? a->job : "",
               a->job ? "\"" : "");
    else if (a->job)
        printf("exported %s of job %s at step %llu to %s (%.3g MB fetched from the workers)\n",
               model, a->job, (unsigned long long)step, a->out, bytes / 1e6);
    else
        printf("exported %s at step %llu to %s\n", model, (unsigned long long)step, a->out);
}

int cmd_export(const cli_command *self, int argc, char **argv)
{
    export_args a;
    int prc = parse_args(self, argc, argv, &a);
    if (prc != CLI_OK)
        return prc;
    sc_err err;
    sc_err_clear(&err);
    if (a.job != NULL) {
        const char *addr;
        char token[256];
        if (cli_coordinator_addr(a.coordinator, &addr, &err) != SC_OK ||
            cli_read_token(a.token_file, "STAGECRAFT_TOKEN", token, sizeof token, &err) != SC_OK)
            return cli_report(self, &err);
        cli_export_result res;
        if (cli_export_job(addr, token, a.job, (uint64_t)a.step, a.out, (int)a.timeout_ms, &res,
                           &err) != SC_OK)
            return cli_report(self, &err);
        print_done(&a, res.model, res.step, res.bytes);
        return CLI_OK;
    }
    kn_model *m = NULL;
    if (kn_model_load(&m, a.model, &err) != SC_OK)
        return cli_report(self, &err);
    uint64_t used = 0;
    sc_status rc = rt_export_hf(m, a.checkpoints, (uint64_t)a.step, a.out, &used, &err);
    if (rc == SC_OK)
        print_done(&a, kn_model_name(m), used, 0);
    kn_model_destroy(&m);
    return rc == SC_OK ? CLI_OK : cli_report(self, &err);
}
