/*
 * rt eval: one stage over the whole model on the chosen device, forwards only, the per-position
 * losses brought back and added in double in position order.
 */
#include "worker/runtime/eval_lm.h"

#include <stdlib.h>

#include "kernels/stage.h"
#include "worker/data/data.h"

sc_status rt_eval_lm(const kn_model *m, const rt_eval_cfg *cfg, double *loss, size_t *tokens,
                     sc_err *err)
{
    const kn_block *b0 = kn_model_block(m, 0);
    if (!b0->in_tokens || kn_model_targets_per_sample(m) != (int)b0->in_floats)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "model %s does not read tokens; eval needs a language model (kinds "
                       "\"gpt\" and \"hf\")",
                       kn_model_name(m));
    int T = (int)b0->in_floats, B = cfg->batch;
    rt_data_cfg dc = {.kind = RT_DATA_TOKENS,
                      .path = cfg->data_path,
                      .inputs_are_tokens = true,
                      .input_elems = (size_t)T,
                      .targets_per_sample = T,
                      .classes = kn_model_classes(m)};
    rt_data *data = NULL;
    SC_CHECK(rt_data_new(&data, &dc, err));
    const uint16_t *stream;
    size_t have;
    rt_data_stream(data, &stream, &have);
    size_t span = (size_t)B * T;
    size_t full = have > 0 ? (have - 1) / span : 0;
    int n = cfg->batches > 0 ? cfg->batches : (int)full;
    sc_status rc = SC_OK;
    kn_stage *st = NULL;
    int32_t *in = malloc(span * sizeof *in), *tgt = malloc(span * sizeof *tgt);
    float *out = malloc(span * sizeof *out);
    if (in == NULL || tgt == NULL || out == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory evaluating");
        goto done;
    }
    if (n == 0 || (size_t)n > full) {
        rc = SC_ERRF(err, SC_ERR_INVALID,
                     "%s: %zu tokens; %d batch%s of %d x %d need %zu (the last target included)",
                     cfg->data_path, have, n > 0 ? n : 1, n > 1 ? "es" : "", B, T,
                     (size_t)(n > 0 ? n : 1) * span + 1);
        goto done;
    }
    kn_stage_cfg sc = kn_stage_cfg_default(0, kn_model_block_count(m) - 1, cfg->device, B);
    SC_CHECK_GOTO(kn_stage_new_cfg(&st, m, &sc, err), done);
    double sum = 0.0;
    for (int bi = 0; bi < n; bi++) {
        const uint16_t *w = stream + (size_t)bi * span;
        for (size_t i = 0; i < span; i++) {
            in[i] = w[i];
            tgt[i] = w[i + 1];
        }
        SC_CHECK_GOTO(kn_stage_forward_host(st, 0, in, tgt, B, err), done);
        SC_CHECK_GOTO(kn_stage_output_to_host(st, 0, out, err), done);
        for (size_t i = 0; i < span; i++)
            sum += out[i];
    }
    *tokens = (size_t)n * span;
    *loss = sum / (double)*tokens;
done:
    kn_stage_destroy(&st);
    free(in);
    free(tgt);
    free(out);
    rt_data_destroy(&data);
    return rc;
}
