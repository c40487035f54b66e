/*
 * `stagecraft profile`: measures each block of a model on this machine's CPU or one of its GPUs
 * and writes the stagecraft-profile JSON the planner reads. Parsing and output only; the
 * measuring is kernels/profile.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "common/sc_util.h"
#include "kernels/device.h"
#include "kernels/model.h"
#include "kernels/profile.h"

/* "1,2,4" -> sizes, strictly increasing as the profile's by_microbatch_size must be; false
 * with a message on a bad list */
static int parse_sizes(const cli_command *self, const char *s, kn_profile_cfg *cfg)
{
    cfg->nsizes = 0;
    const char *p = s;
    while (*p) {
        char item[32];
        size_t len = strcspn(p, ",");
        /* an empty item, including after a trailing comma, is a typo */
        if (len == 0 || len >= sizeof item || cfg->nsizes == KN_PROFILE_SIZES_MAX ||
            (p[len] == ',' && p[len + 1] == '\0'))
            return cli_usage_error(self,
                                   "--microbatch: expected up to %d sizes like 1,2,4, got "
                                   "'%s'",
                                   KN_PROFILE_SIZES_MAX, s);
        memcpy(item, p, len);
        item[len] = '\0';
        int64_t v;
        sc_err err;
        sc_err_clear(&err);
        if (sc_parse_int64(item, 1, 1 << 20, "--microbatch", &v, &err) != SC_OK)
            return cli_usage_error(self, "%s", err.msg);
        if (cfg->nsizes > 0 && v <= cfg->sizes[cfg->nsizes - 1])
            return cli_usage_error(self,
                                   "--microbatch: sizes must increase strictly (e.g. 1,2,4), "
                                   "got '%s'",
                                   s);
        cfg->sizes[cfg->nsizes++] = (int)v;
        p += len;
        if (*p == ',')
            p++;
    }
    if (cfg->nsizes == 0)
        return cli_usage_error(self, "--microbatch: expected sizes like 1,2,4");
    return CLI_OK;
}

/* Whether `path` can be written, checked before minutes of profiling rather than after: opened
 * for writing without truncating (an existing file keeps its content), and removed again when
 * this check created it. Returns the errno of the failure, 0 when it can be written. */
static int out_path_error(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd >= 0) {
        close(fd);
        unlink(path);
        return 0;
    }
    if (errno != EEXIST)
        return errno;
    fd = open(path, O_WRONLY);
    if (fd < 0)
        return errno;
    close(fd);
    return 0;
}

int cmd_profile(const cli_command *self, int argc, char **argv)
{
    const char *model_path = NULL, *device = "cpu", *sizes = "1", *out_path = NULL;
    int64_t warmup = 2, repeats = 5, main_size = 0, sustained_ms = 0;
    kn_precision prec = KN_PREC_FP32;
    sc_err err;
    sc_err_clear(&err);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--json") == 0) {
            continue;                          /* the output is always JSON */
        } else if (strcmp(a, "--tf32") == 0) { /* the same as --precision tf32 */
            prec = KN_PREC_TF32;
            continue;
        }
        if (v == NULL)
            return cli_usage_error(self, "unknown argument or missing value: '%s'", a);
        if (strcmp(a, "--model") == 0)
            model_path = v;
        else if (strcmp(a, "--device") == 0)
            device = v;
        else if (strcmp(a, "--microbatch") == 0)
            sizes = v;
        else if (strcmp(a, "--out") == 0)
            out_path = v;
        else if (strcmp(a, "--precision") == 0) {
            if (kn_precision_parse(v, "--precision", &prec, &err) != SC_OK)
                return cli_usage_error(self, "%s", err.msg);
        } else if (strcmp(a, "--warmup") == 0) {
            if (sc_parse_int64(v, 0, 1000, "--warmup", &warmup, &err) != SC_OK)
                return cli_usage_error(self, "%s", err.msg);
        } else if (strcmp(a, "--repeats") == 0) {
            if (sc_parse_int64(v, 1, 10000, "--repeats", &repeats, &err) != SC_OK)
                return cli_usage_error(self, "%s", err.msg);
        } else if (strcmp(a, "--sustained-ms") == 0) {
            if (sc_parse_int64(v, 0, 600000, "--sustained-ms", &sustained_ms, &err) != SC_OK)
                return cli_usage_error(self, "%s", err.msg);
        } else if (strcmp(a, "--microbatch-size") == 0) {
            if (sc_parse_int64(v, 1, 1 << 20, "--microbatch-size", &main_size, &err) != SC_OK)
                return cli_usage_error(self, "%s", err.msg);
        } else
            return cli_usage_error(self, "unknown argument '%s'", a);
        i++;
    }
    if (model_path == NULL)
        return cli_usage_error(self, "--model SPEC is required");
    int out_errno = out_path != NULL ? out_path_error(out_path) : 0;
    if (out_errno != 0) {
        fprintf(stderr, "stagecraft profile: --out %s: cannot write the file: %s\n", out_path,
                strerror(out_errno));
        return CLI_USAGE;
    }
    kn_profile_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.warmup = (int)warmup;
    cfg.repeats = (int)repeats;
    cfg.precision = prec;
    cfg.min_time_s = (double)sustained_ms / 1000.0;
    int rc = parse_sizes(self, sizes, &cfg);
    if (rc != CLI_OK)
        return rc;
    if (main_size == 0) {
        for (int s = 0; s < cfg.nsizes; s++)
            if (cfg.sizes[s] > main_size)
                main_size = cfg.sizes[s];
    } else {
        int found = 0;
        for (int s = 0; s < cfg.nsizes; s++)
            found |= cfg.sizes[s] == main_size;
        if (!found)
            return cli_usage_error(self, "--microbatch-size %lld is not one of --microbatch %s",
                                   (long long)main_size, sizes);
    }
    if (kn_device_parse(device, "--device", &cfg.device, &err) != SC_OK)
        return cli_usage_error(self, "%s", err.msg);
    cfg.precision = kn_precision_resolve(cfg.precision, cfg.device.kind == KN_DEV_CUDA,
                                         kn_device_has_bf16(cfg.device));

    kn_model *model = NULL;
    if (kn_model_load(&model, model_path, &err) != SC_OK)
        return cli_report(self, &err);
    int nb = kn_model_block_count(model);
    kn_profile_block *blocks = calloc(nb, sizeof *blocks);
    void *doc = NULL;
    if (blocks == NULL) {
        kn_model_destroy(&model);
        fprintf(stderr, "stagecraft profile: out of memory\n");
        return CLI_FAILURE;
    }
    char devname[128];
    kn_device_name(cfg.device, devname, sizeof devname);
    if (kn_profile_run(model, &cfg, blocks, &err) != SC_OK ||
        kn_profile_to_json(model, devname, (int)main_size, blocks, nb, &doc, &err) != SC_OK) {
        free(blocks);
        kn_model_destroy(&model);
        fprintf(stderr, "stagecraft profile: %s\n", err.msg);
        return CLI_FAILURE;
    }
    int status = CLI_OK;
    int flags = JSON_INDENT(1) | JSON_REAL_PRECISION(6);
    if (out_path != NULL) {
        errno = 0;
        if (json_dump_file(doc, out_path, flags) != 0) {
            fprintf(stderr, "stagecraft profile: --out %s: cannot write the file: %s\n", out_path,
                    errno ? strerror(errno) : "write error");
            status = CLI_USAGE;
        }
    } else {
        json_dumpf(doc, stdout, flags);
        printf("\n");
    }
    json_decref(doc);
    free(blocks);
    kn_model_destroy(&model);
    return status;
}
