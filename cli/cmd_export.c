/*
 * `stagecraft export`: writes a trained model as a Hugging Face checkpoint folder (config.json +
 * model.safetensors, what transformers' from_pretrained loads) from the stage checkpoint files of
 * a job. Parsing and output only; the work is worker/runtime/export_hf.
 */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "common/sc_util.h"
#include "kernels/model.h"
#include "worker/runtime/export_hf.h"

int cmd_export(const cli_command *self, int argc, char **argv)
{
    const char *model_path = NULL, *ckpt_dir = NULL, *out_dir = NULL;
    int64_t step = 0;
    bool json = false;
    sc_err err;
    sc_err_clear(&err);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--json") == 0) {
            json = true;
            continue;
        }
        if (v == NULL)
            return cli_usage_error(self, "unknown argument or missing value: '%s'", a);
        if (strcmp(a, "--model") == 0)
            model_path = v;
        else if (strcmp(a, "--checkpoints") == 0)
            ckpt_dir = v;
        else if (strcmp(a, "--out") == 0)
            out_dir = v;
        else if (strcmp(a, "--step") == 0) {
            if (sc_parse_int64(v, 1, INT64_MAX, "--step", &step, &err) != SC_OK)
                return cli_usage_error(self, "%s", err.msg);
        } else
            return cli_usage_error(self, "unknown argument '%s'", a);
        i++;
    }
    if (model_path == NULL || ckpt_dir == NULL || out_dir == NULL)
        return cli_usage_error(self, "--model SPEC, --checkpoints DIR and --out DIR are required");
    kn_model *m = NULL;
    if (kn_model_load(&m, model_path, &err) != SC_OK)
        return cli_report(self, &err);
    uint64_t used = 0;
    sc_status rc = rt_export_hf(m, ckpt_dir, (uint64_t)step, out_dir, &used, &err);
    if (rc == SC_OK) {
        if (json)
            printf("{\"out\": \"%s\", \"step\": %llu, \"model\": \"%s\"}\n", out_dir,
                   (unsigned long long)used, kn_model_name(m));
        else
            printf("exported %s at step %llu to %s\n", kn_model_name(m), (unsigned long long)used,
                   out_dir);
    }
    kn_model_destroy(&m);
    return rc == SC_OK ? CLI_OK : cli_report(self, &err);
}
