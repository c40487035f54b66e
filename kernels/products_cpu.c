/* The CPU's matrix products in the context's precision: see products_cpu.h. */
#include "kernels/products_cpu.h"

#include <stdlib.h>

#include "kernels/attention.h"
#include "kernels/linear.h"
#include "kernels/precision.h"

/* A rounded copy of n floats, or NULL after setting err; free() it. */
static float *rounded(const kn_ctx *c, const float *x, size_t n, sc_err *err)
{
    float *r = malloc((n ? n : 1) * sizeof *r);
    if (r == NULL) {
        SC_ERRF(err, SC_ERR_NOMEM, "no memory for a %s copy of %zu values",
                kn_precision_name(c->prec), n);
        return NULL;
    }
    kn_round_copy(c->prec, r, x, n);
    return r;
}

static bool half(const kn_ctx *c)
{
    return kn_precision_is_half(c->prec);
}

/* out (C) += the column sums of the row-major (N, C) matrix m */
static void colsum_add(float *out, const float *m, int N, int C)
{
    for (int r = 0; r < N; r++)
        for (int j = 0; j < C; j++)
            out[j] += m[(size_t)r * C + j];
}

sc_status kn_cpu_linear_forward(const kn_ctx *c, float *out, const float *inp, const float *w,
                                const float *b, int N, int IC, int OC, sc_err *err)
{
    void (*fn)(float *, const float *, const float *, const float *, int, int, int) =
        c->cpu_fast ? kn_linear_forward_fast : kn_linear_forward_cpu;
    if (!half(c)) {
        fn(out, inp, w, b, N, IC, OC);
        return SC_OK;
    }
    float *ri = rounded(c, inp, (size_t)N * IC, err),
          *rw = ri ? rounded(c, w, (size_t)OC * IC, err) : NULL;
    if (rw != NULL)
        fn(out, ri, rw, b, N, IC, OC);
    free(ri);
    free(rw);
    return rw != NULL ? SC_OK : SC_ERR_NOMEM;
}

sc_status kn_cpu_linear_backward_input(const kn_ctx *c, float *dinp, const float *dout,
                                       const float *w, int N, int IC, int OC, sc_err *err)
{
    void (*fn)(float *, const float *, const float *, int, int, int) =
        c->cpu_fast ? kn_linear_backward_input_fast : kn_linear_backward_input_cpu;
    if (!half(c)) {
        fn(dinp, dout, w, N, IC, OC);
        return SC_OK;
    }
    float *rd = rounded(c, dout, (size_t)N * OC, err),
          *rw = rd ? rounded(c, w, (size_t)OC * IC, err) : NULL;
    if (rw != NULL)
        fn(dinp, rd, rw, N, IC, OC);
    free(rd);
    free(rw);
    return rw != NULL ? SC_OK : SC_ERR_NOMEM;
}

sc_status kn_cpu_linear_backward_weight(const kn_ctx *c, float *dw, float *db, const float *dout,
                                        const float *inp, int N, int IC, int OC, sc_err *err)
{
    void (*fn)(float *, float *, const float *, const float *, int, int, int) =
        c->cpu_fast ? kn_linear_backward_weight_fast : kn_linear_backward_weight_cpu;
    if (!half(c)) {
        fn(dw, db, dout, inp, N, IC, OC);
        return SC_OK;
    }
    float *rd = rounded(c, dout, (size_t)N * OC, err),
          *ri = rd ? rounded(c, inp, (size_t)N * IC, err) : NULL;
    if (ri != NULL) {
        fn(dw, NULL, rd, ri, N, IC, OC);
        if (db != NULL)
            colsum_add(db, dout, N, OC);
    }
    free(rd);
    free(ri);
    return ri != NULL ? SC_OK : SC_ERR_NOMEM;
}

sc_status kn_cpu_attention_forward(const kn_ctx *c, float *out, float *att, const float *qkv, int B,
                                   int T, int C, int NH, sc_err *err)
{
    void (*fn)(float *, float *, const float *, int, int, int, int) =
        c->cpu_fast ? kn_attention_forward_fast : kn_attention_forward_cpu;
    if (!half(c)) {
        fn(out, att, qkv, B, T, C, NH);
        return SC_OK;
    }
    float *rq = rounded(c, qkv, (size_t)B * T * 3 * C, err);
    if (rq == NULL)
        return SC_ERR_NOMEM;
    fn(out, att, rq, B, T, C, NH);
    free(rq);
    /* the probabilities the backward reads, as the GPU stashes them */
    kn_round_copy(c->prec, att, att, (size_t)B * NH * T * T);
    return SC_OK;
}

sc_status kn_cpu_attention_backward(const kn_ctx *c, float *dqkv, float *ws, const float *dout,
                                    const float *qkv, const float *att, int B, int T, int C, int NH,
                                    sc_err *err)
{
    void (*fn)(float *, float *, const float *, const float *, const float *, int, int, int, int) =
        c->cpu_fast ? kn_attention_backward_fast : kn_attention_backward_cpu;
    if (!half(c)) {
        fn(dqkv, ws, dout, qkv, att, B, T, C, NH);
        return SC_OK;
    }
    size_t BTC = (size_t)B * T * C;
    float *rd = rounded(c, dout, BTC, err), *rq = rd ? rounded(c, qkv, 3 * BTC, err) : NULL;
    if (rq != NULL)
        fn(dqkv, ws, rd, rq, att, B, T, C, NH);
    free(rd);
    free(rq);
    return rq != NULL ? SC_OK : SC_ERR_NOMEM;
}

static size_t conv_in(const kn_conv2d_shape *s, int B)
{
    return (size_t)B * s->cin * s->h * s->w;
}

static size_t conv_out(const kn_conv2d_shape *s, int B)
{
    return (size_t)B * s->cout * kn_conv2d_out_h(s) * kn_conv2d_out_w(s);
}

static size_t conv_w(const kn_conv2d_shape *s)
{
    return (size_t)s->cout * s->cin * s->k * s->k;
}

sc_status kn_cpu_conv2d_forward(const kn_ctx *c, float *out, float *col, const float *inp,
                                const float *w, const float *b, int B, const kn_conv2d_shape *s,
                                sc_err *err)
{
    void (*fn)(float *, float *, const float *, const float *, const float *, int,
               const kn_conv2d_shape *) =
        c->cpu_fast ? kn_conv2d_forward_fast : kn_conv2d_forward_cpu;
    if (!half(c)) {
        fn(out, col, inp, w, b, B, s);
        return SC_OK;
    }
    float *ri = rounded(c, inp, conv_in(s, B), err),
          *rw = ri ? rounded(c, w, conv_w(s), err) : NULL;
    if (rw != NULL)
        fn(out, col, ri, rw, b, B, s);
    free(ri);
    free(rw);
    return rw != NULL ? SC_OK : SC_ERR_NOMEM;
}

sc_status kn_cpu_conv2d_backward_input(const kn_ctx *c, float *dinp, float *col, const float *dout,
                                       const float *w, int B, const kn_conv2d_shape *s, sc_err *err)
{
    void (*fn)(float *, float *, const float *, const float *, int, const kn_conv2d_shape *) =
        c->cpu_fast ? kn_conv2d_backward_input_fast : kn_conv2d_backward_input_cpu;
    if (!half(c)) {
        fn(dinp, col, dout, w, B, s);
        return SC_OK;
    }
    float *rd = rounded(c, dout, conv_out(s, B), err),
          *rw = rd ? rounded(c, w, conv_w(s), err) : NULL;
    if (rw != NULL)
        fn(dinp, col, rd, rw, B, s);
    free(rd);
    free(rw);
    return rw != NULL ? SC_OK : SC_ERR_NOMEM;
}

sc_status kn_cpu_conv2d_backward_weight(const kn_ctx *c, float *dw, float *db, float *col,
                                        const float *dout, const float *inp, int B,
                                        const kn_conv2d_shape *s, sc_err *err)
{
    void (*fn)(float *, float *, float *, const float *, const float *, int,
               const kn_conv2d_shape *) =
        c->cpu_fast ? kn_conv2d_backward_weight_fast : kn_conv2d_backward_weight_cpu;
    if (!half(c)) {
        fn(dw, db, col, dout, inp, B, s);
        return SC_OK;
    }
    float *rd = rounded(c, dout, conv_out(s, B), err),
          *ri = rd ? rounded(c, inp, conv_in(s, B), err) : NULL;
    /* the kernels add a bias gradient too: from the rounded dout into a scratch, unused */
    float *scratch = ri != NULL ? calloc((size_t)s->cout, sizeof *scratch) : NULL;
    if (scratch != NULL) {
        fn(dw, scratch, col, rd, ri, B, s);
        if (db != NULL) { /* per output channel: the sum over samples and positions */
            size_t P = (size_t)kn_conv2d_out_h(s) * kn_conv2d_out_w(s);
            for (int n = 0; n < B; n++)
                for (int o = 0; o < s->cout; o++)
                    for (size_t p = 0; p < P; p++)
                        db[o] += dout[((size_t)n * s->cout + o) * P + p];
        }
    }
    free(scratch);
    free(rd);
    free(ri);
    if (ri != NULL && scratch == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "no memory for a bias gradient of %d values", s->cout);
    return ri != NULL ? SC_OK : SC_ERR_NOMEM;
}
