/*
 * KN_DISPATCH(block, what, cpu_call, gpu_call): one op of a block's forward or backward on the
 * context's device (kernels/ only, for block.c and block_llama.c). On a CUDA context it makes
 * the context's device current and runs gpu_call (a launcher returning 0 or a CUDA error code);
 * an error returns SC_ERR_CUDA naming the op and the block. Elsewhere it runs cpu_call. Expects
 * `c` (the kn_ctx) and `err` in scope.
 */
#ifndef KN_BLOCK_DISPATCH_H
#define KN_BLOCK_DISPATCH_H

#include "kernels/device_impl.h"

#ifdef SC_HAVE_CUDA
#define KN_DISPATCH(block, what, cpu_call, gpu_call)                                               \
    do {                                                                                           \
        if (c->dev.kind == KN_DEV_CUDA) {                                                          \
            int rc_ = kn_cuda_enter(c);                                                            \
            if (rc_ == 0)                                                                          \
                rc_ = (gpu_call);                                                                  \
            if (rc_ != 0)                                                                          \
                return SC_ERRF(err, SC_ERR_CUDA, "%s (%s): %s", what, (block)->name,               \
                               kn_cuda_error_string(rc_));                                         \
        } else {                                                                                   \
            cpu_call;                                                                              \
        }                                                                                          \
    } while (0)
#else
/* CPU-only build: the context, block and error record exist for the CUDA branch alone */
#define KN_DISPATCH(block, what, cpu_call, gpu_call)                                               \
    do {                                                                                           \
        (void)c;                                                                                   \
        (void)(block);                                                                             \
        (void)err;                                                                                 \
        cpu_call;                                                                                  \
    } while (0)
#endif

#endif /* KN_BLOCK_DISPATCH_H */
