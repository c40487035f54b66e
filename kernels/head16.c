/*
 * kn head16: see head16.h. The three launches run on the context's stream, one after another.
 */
#include "kernels/head16.h"

#include "kernels/crossentropy.h"
#include "kernels/linear.h"
#include "kernels/precision.h"

#ifdef SC_HAVE_CUDA

bool kn_head16_applies(const kn_ctx *c)
{
    return c->dev.kind == KN_DEV_CUDA && kn_precision_is_half(c->prec);
}

sc_status kn_head16_backward(kn_ctx *c, const char *block, bool input, bool weight, float *dx,
                             float *dw, void *dlogits16, const float *probs, const int32_t *targets,
                             float dloss, const float *x, const float *w, int N, int C, int V,
                             sc_err *err)
{
    const char *what = "cross-entropy backward (16-bit)";
    int rc = kn_cuda_enter(c);
    if (rc == 0)
        rc = kn_crossentropy_backward_half_cuda(c, dlogits16, probs, targets, dloss, N, V);
    if (rc == 0 && input) {
        what = "linear backward (input, 16-bit)";
        rc = kn_linear_backward_input_half_cuda(c, dx, dlogits16, w, N, C, V);
    }
    if (rc == 0 && weight) {
        what = "linear backward (weight, 16-bit)";
        rc = kn_linear_backward_weight_half_cuda(c, dw, dlogits16, x, N, C, V);
    }
    if (rc != 0)
        return SC_ERRF(err, SC_ERR_CUDA, "%s (%s): %s", what, block, kn_cuda_error_string(rc));
    return SC_OK;
}

#else /* no CUDA: the path never runs */

bool kn_head16_applies(const kn_ctx *c)
{
    (void)c;
    return false;
}

sc_status kn_head16_backward(kn_ctx *c, const char *block, bool input, bool weight, float *dx,
                             float *dw, void *dlogits16, const float *probs, const int32_t *targets,
                             float dloss, const float *x, const float *w, int N, int C, int V,
                             sc_err *err)
{
    (void)c, (void)input, (void)weight, (void)dx, (void)dw, (void)dlogits16, (void)probs;
    (void)targets, (void)dloss, (void)x, (void)w, (void)N, (void)C, (void)V;
    return SC_ERRF(err, SC_ERR_UNSUPPORTED, "%s: this build has no CUDA", block);
}

#endif
