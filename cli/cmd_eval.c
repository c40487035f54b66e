/*
 * `stagecraft eval`: the mean next-token cross-entropy of a language model (a model spec, or a
 * Hugging Face checkpoint folder) over llm.c token shards read in order. Parsing and output only;
 * the work is worker/runtime/eval_lm.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/commands.h"
#include "common/sc_util.h"
#include "kernels/device.h"
#include "kernels/model.h"
#include "worker/runtime/eval_lm.h"

/* A folder is a checkpoint (kind "hf" with seq_len T when given); a file a model spec, whose
 * seq_len --seq-len must then match. */
static sc_status open_model(const char *path, int64_t T, kn_model **m, sc_err *err)
{
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        json_t *spec = json_pack("{s:s, s:i, s:s, s:s}", "format", "stagecraft-model", "version", 1,
                                 "kind", "hf", "path", path);
        if (spec == NULL)
            return SC_ERRF(err, SC_ERR_NOMEM, "out of memory");
        if (T > 0)
            json_object_set_new(spec, "seq_len", json_integer(T));
        char *text = json_dumps(spec, JSON_COMPACT);
        json_decref(spec);
        if (text == NULL)
            return SC_ERRF(err, SC_ERR_NOMEM, "out of memory");
        sc_status rc = kn_model_parse(m, path, text, strlen(text), err);
        free(text);
        return rc;
    }
    SC_CHECK(kn_model_load(m, path, err));
    int have = kn_model_targets_per_sample(*m);
    if (T > 0 && T != have) {
        kn_model_destroy(m);
        return SC_ERRF(err, SC_ERR_INVALID,
                       "--seq-len %lld: model %s has seq_len %d (change the spec, or give a "
                       "checkpoint folder, whose context can be shortened)",
                       (long long)T, path, have);
    }
    return SC_OK;
}

int cmd_eval(const cli_command *self, int argc, char **argv)
{
    const char *model_path = NULL, *data = NULL, *device = "cpu";
    int64_t T = 0, B = 4, N = 0;
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
        else if (strcmp(a, "--data") == 0)
            data = v;
        else if (strcmp(a, "--device") == 0)
            device = v;
        else if (strcmp(a, "--seq-len") == 0) {
            if (sc_parse_int64(v, 1, 1 << 16, "--seq-len", &T, &err) != SC_OK)
                return cli_usage_error(self, "%s", err.msg);
        } else if (strcmp(a, "--batch") == 0) {
            if (sc_parse_int64(v, 1, 1 << 16, "--batch", &B, &err) != SC_OK)
                return cli_usage_error(self, "%s", err.msg);
        } else if (strcmp(a, "--batches") == 0) {
            if (sc_parse_int64(v, 1, 1 << 30, "--batches", &N, &err) != SC_OK)
                return cli_usage_error(self, "%s", err.msg);
        } else
            return cli_usage_error(self, "unknown argument '%s'", a);
        i++;
    }
    if (model_path == NULL || data == NULL)
        return cli_usage_error(self, "--model SPEC|DIR and --data PATH are required");
    rt_eval_cfg cfg = {.data_path = data, .batch = (int)B, .batches = (int)N};
    if (kn_device_parse(device, "--device", &cfg.device, &err) != SC_OK)
        return cli_usage_error(self, "%s", err.msg);
    kn_model *m = NULL;
    if (open_model(model_path, T, &m, &err) != SC_OK)
        return cli_report(self, &err);
    double loss = 0;
    size_t tokens = 0;
    sc_status rc = rt_eval_lm(m, &cfg, &loss, &tokens, &err);
    if (rc == SC_OK) {
        if (json)
            printf("{\"loss\": %.9g, \"tokens\": %zu}\n", loss, tokens);
        else
            printf("%s: mean cross-entropy %.6f over %zu tokens\n", kn_model_name(m), loss, tokens);
    }
    kn_model_destroy(&m);
    return rc == SC_OK ? CLI_OK : cli_report(self, &err);
}
