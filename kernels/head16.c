/*
 * kn head16: see head16.h. The launches run on the context's stream, one after another.
 */
#include "kernels/head16.h"

#include "kernels/crossentropy.h"
#include "kernels/linear.h"
#include "kernels/precision.h"

int kn_head16_ld(int V)
{
    return (V + 63) / 64 * 64;
}

#ifdef SC_HAVE_CUDA

bool kn_head16_applies(const kn_ctx *c)
{
    return c->dev.kind == KN_DEV_CUDA && kn_precision_is_half(c->prec);
}

static sc_status failed(int rc, const char *what, const char *block, sc_err *err)
{
    return SC_ERRF(err, SC_ERR_CUDA, "%s (%s): %s", what, block, kn_cuda_error_string(rc));
}

sc_status kn_head16_forward(kn_ctx *c, const char *block, float *losses, float *probs,
                            void *logits16, const float *x, const float *w, const int32_t *targets,
                            int N, int C, int V, sc_err *err)
{
    int ld = kn_head16_ld(V);
    int rc = kn_cuda_enter(c);
    if (rc == 0)
        rc = kn_linear_forward_half_out_cuda(c, logits16, ld, x, w, N, C, V);
    if (rc != 0)
        return failed(rc, "linear forward (16-bit logits)", block, err);
    rc = kn_crossentropy_forward_half_cuda(c, losses, probs, logits16, ld, targets, N, V);
    if (rc != 0)
        return failed(rc, "cross-entropy forward (16-bit logits)", block, err);
    return SC_OK;
}

sc_status kn_head16_backward(kn_ctx *c, const char *block, bool input, bool weight, float *dx,
                             float *dw, void *dlogits16, int ld, const float *probs,
                             const int32_t *targets, float dloss, const float *x, const float *w,
                             int N, int C, int V, sc_err *err)
{
    int rc = kn_cuda_enter(c);
    if (rc == 0)
        rc = kn_crossentropy_backward_half_cuda(c, dlogits16, ld, probs, targets, dloss, N, V);
    if (rc != 0)
        return failed(rc, "cross-entropy backward (16-bit)", block, err);
    if (input && (rc = kn_linear_backward_input_half_cuda(c, dx, dlogits16, ld, w, N, C, V)) != 0)
        return failed(rc, "linear backward (input, 16-bit)", block, err);
    if (weight && (rc = kn_linear_backward_weight_half_cuda(c, dw, dlogits16, ld, x, N, C, V)) != 0)
        return failed(rc, "linear backward (weight, 16-bit)", block, err);
    return SC_OK;
}

#else /* no CUDA: the path never runs */

bool kn_head16_applies(const kn_ctx *c)
{
    (void)c;
    return false;
}

sc_status kn_head16_forward(kn_ctx *c, const char *block, float *losses, float *probs,
                            void *logits16, const float *x, const float *w, const int32_t *targets,
                            int N, int C, int V, sc_err *err)
{
    (void)c, (void)losses, (void)probs, (void)logits16, (void)x, (void)w, (void)targets;
    (void)N, (void)C, (void)V;
    return SC_ERRF(err, SC_ERR_UNSUPPORTED, "%s: this build has no CUDA", block);
}

sc_status kn_head16_backward(kn_ctx *c, const char *block, bool input, bool weight, float *dx,
                             float *dw, void *dlogits16, int ld, const float *probs,
                             const int32_t *targets, float dloss, const float *x, const float *w,
                             int N, int C, int V, sc_err *err)
{
    (void)c, (void)input, (void)weight, (void)dx, (void)dw, (void)dlogits16, (void)ld;
    (void)probs, (void)targets, (void)dloss, (void)x, (void)w, (void)N, (void)C, (void)V;
    return SC_ERRF(err, SC_ERR_UNSUPPORTED, "%s: this build has no CUDA", block);
}

#endif
