/* The demo's fine-tuning part (see demo_finetune.h). */
#include "cli/demo_finetune.h"

#include <jansson.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/client.h"
#include "cli/export_job.h"
#include "cli/follow.h"
#include "common/sc_util.h"
#include "kernels/model.h"
#include "worker/runtime/eval_lm.h"

#define FT_VOCAB 96     /* printable ASCII (32..126) and the newline */
#define FT_SEQ_LEN 32   /* the fixture's max_position_embeddings */
#define FT_EVAL_BATCH 4 /* rows per evaluated batch */
#define FT_TEXT_MAX (1 << 20)
#define FT_SHARD_MAGIC 20240520

/* A byte of text as a token: ' '..'~' as 0..94, '\n' as 95, anything else as ' '. */
static uint16_t token_of(unsigned char c)
{
    if (c == '\n')
        return 95;
    return c >= 32 && c <= 126 ? (uint16_t)(c - 32) : 0;
}

/* Writes tokens [from, to) of `text` as an llm.c shard (256 int32 header, uint16 tokens). */
static sc_status write_shard(const char *path, const char *text, size_t from, size_t to,
                             sc_err *err)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return SC_ERRF(err, SC_ERR_IO, "%s: cannot write", path);
    int32_t hdr[256] = {FT_SHARD_MAGIC, 1, (int32_t)(to - from)};
    bool ok = fwrite(hdr, sizeof hdr, 1, f) == 1;
    for (size_t i = from; ok && i < to; i++) {
        uint16_t t = token_of((unsigned char)text[i]);
        ok = fwrite(&t, sizeof t, 1, f) == 1;
    }
    ok = fclose(f) == 0 && ok;
    return ok ? SC_OK : SC_ERRF(err, SC_ERR_IO, "%s: write failed", path);
}

/* The model spec of checkpoint folder `dir` at the demo's context, as JSON text (caller
 * frees). */
static char *model_spec(const char *dir, bool with_format)
{
    json_t *o = json_pack("{s:s, s:s, s:i}", "kind", "hf", "path", dir, "seq_len", FT_SEQ_LEN);
    if (with_format) {
        json_object_set_new(o, "format", json_string("stagecraft-model"));
        json_object_set_new(o, "version", json_integer(1));
    }
    char *text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return text;
}

/* The loss of the model in folder `dir` on the held-out shard. */
static sc_status held_out_loss(const char *dir, const char *shard, double *loss, sc_err *err)
{
    char *spec = model_spec(dir, true);
    SC_ALLOC_CHECK(spec, err);
    kn_model *m = NULL;
    sc_status rc = kn_model_parse(&m, dir, spec, strlen(spec), err);
    free(spec);
    SC_CHECK(rc);
    rt_eval_cfg cfg = {.data_path = shard, .batch = FT_EVAL_BATCH, .batches = 0};
    cfg.device.kind = KN_DEV_CPU;
    size_t tokens = 0;
    rc = rt_eval_lm(m, &cfg, loss, &tokens, err);
    kn_model_destroy(&m);
    return rc;
}

static sc_status submit(const demo_finetune_cfg *cfg, const char *train, char *job_id, size_t size,
                        sc_err *err)
{
    char *model = model_spec(cfg->checkpoint, false);
    SC_ALLOC_CHECK(model, err);
    json_t *model_json = json_loads(model, 0, NULL);
    if (model_json != NULL && cfg->cpu_kernels != NULL)
        json_object_set_new(model_json, "cpu_kernels", json_string(cfg->cpu_kernels));
    json_t *job = json_pack("{s:s, s:i, s:s, s:o, s:{s:s, s:s}, s:i, s:i, s:s, s:s, s:i, s:i,"
                            " s:i, s:i, s:{s:s, s:f, s:f}}",
                            "format", "stagecraft-job", "version", 1, "name", "demo-llama-finetune",
                            "model", model_json, "data", "kind", "tokens", "path", train,
                            "batch_size", 16, "microbatches", 4, "schedule", "1f1b", "strategy",
                            "uniform", "workers", cfg->stages, "stages", cfg->stages, "steps",
                            cfg->steps, "checkpoint_every", cfg->steps / 2 > 0 ? cfg->steps / 2 : 1,
                            "optimizer", "kind", "adamw", "lr", 3e-3, "weight_decay", 0.0);
    free(model);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/finetune.json", cfg->scratch);
    json_dump_file(job, path, JSON_INDENT(2));
    char *text = json_dumps(job, 0);
    json_decref(job);
    SC_ALLOC_CHECK(text, err);
    Stagecraft__SubmitJobRequest req = STAGECRAFT__SUBMIT_JOB_REQUEST__INIT;
    Stagecraft__Header hdr = STAGECRAFT__HEADER__INIT;
    hdr.token = (char *)cfg->token;
    req.header = &hdr;
    req.job_json = text;
    ProtobufCMessage *m = NULL;
    sc_status rc = cli_call(cfg->addr, "/stagecraft.Coordinator/SubmitJob", &req.base,
                            &stagecraft__submit_job_response__descriptor, &m, err);
    free(text);
    SC_CHECK(rc);
    sc_strlcpy(job_id, ((Stagecraft__SubmitJobResponse *)m)->job_id, size);
    protobuf_c_message_free_unpacked(m, NULL);
    printf("submitted %s (%s): fine-tune %s, %d steps on %d stages\n", job_id, path,
           cfg->checkpoint, cfg->steps, cfg->stages);
    return SC_OK;
}

static int failed(const sc_err *err)
{
    fprintf(stderr, "stagecraft demo: fine-tuning: %s\n", err->msg);
    return 1;
}

int demo_finetune(const demo_finetune_cfg *cfg, volatile sig_atomic_t *stop)
{
    sc_err err;
    sc_err_clear(&err);
    printf("\nfine-tuning a Hugging Face checkpoint: %s\n", cfg->checkpoint);
    char *text = NULL;
    size_t len = 0;
    if (sc_file_read(cfg->text, FT_TEXT_MAX, &text, &len, &err) != SC_OK)
        return failed(&err);
    /* the last tenth held out (at least two evaluated batches' worth), the rest trained on */
    size_t held = len / 10 > 2 * FT_EVAL_BATCH * FT_SEQ_LEN + 1
                      ? len / 10
                      : 2 * FT_EVAL_BATCH * FT_SEQ_LEN + 1;
    if (len < held + FT_SEQ_LEN + 1) {
        free(text);
        SC_ERRF(&err, SC_ERR_INVALID, "%s: %zu bytes, too few to train on and hold %zu out",
                cfg->text, len, held);
        return failed(&err);
    }
    char train[PATH_MAX], val[PATH_MAX], out[PATH_MAX];
    snprintf(train, sizeof train, "%s/finetune_train.bin", cfg->scratch);
    snprintf(val, sizeof val, "%s/finetune_val.bin", cfg->scratch);
    snprintf(out, sizeof out, "%s/llama-tuned", cfg->scratch);
    sc_status rc = write_shard(train, text, 0, len - held, &err);
    if (rc == SC_OK)
        rc = write_shard(val, text, len - held, len, &err);
    free(text);
    if (rc != SC_OK)
        return failed(&err);
    printf("  the text as tokens of the model's %d (printable ASCII and newline): %zu to train "
           "on, %zu held out\n",
           FT_VOCAB, len - held, held);
    double before = 0, after = 0;
    if (held_out_loss(cfg->checkpoint, val, &before, &err) != SC_OK)
        return failed(&err);
    printf("  held-out loss before: %.4f (stagecraft eval --model %s --data %s --seq-len %d "
           "--batch %d)\n",
           before, cfg->checkpoint, val, FT_SEQ_LEN, FT_EVAL_BATCH);
    fflush(stdout);
    char job_id[64];
    if (submit(cfg, train, job_id, sizeof job_id, &err) != SC_OK)
        return failed(&err);
    fflush(stdout);
    if (cli_follow_job(cfg->addr, job_id, false, 1.0, &err) != 0) {
        if (*stop)
            return 1;
        if (err.code == SC_OK)
            SC_ERRF(&err, SC_ERR_PRECONDITION, "job %s did not succeed (stagecraft status %s)",
                    job_id, job_id);
        return failed(&err);
    }
    cli_export_result res;
    if (cli_export_job(cfg->addr, cfg->token, job_id, 0, out, 10000, &res, &err) != SC_OK)
        return failed(&err);
    printf("  stagecraft export %s --out %s: %s at step %llu, %.3g MB fetched from the "
           "workers\n",
           job_id, out, res.model, (unsigned long long)res.step, res.bytes / 1e6);
    if (held_out_loss(out, val, &after, &err) != SC_OK)
        return failed(&err);
    printf("  held-out loss after:  %.4f (the same windows, read from %s)\n", after, out);
    return 0;
}

bool demo_finetune_default(char *buf, size_t size)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return false;
    exe[n] = '\0';
    /* BUILD/cli/stagecraft, BUILD a folder of the source tree */
    for (int up = 0; up < 3; up++) {
        char *slash = strrchr(exe, '/');
        if (slash == NULL)
            return false;
        *slash = '\0';
        char path[PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/tests/data/hf/llama-tied/config.json", exe);
        struct stat sb;
        if (up >= 1 && stat(path, &sb) == 0) {
            snprintf(buf, size, "%s/tests/data/hf/llama-tied", exe);
            return true;
        }
    }
    return false;
}
