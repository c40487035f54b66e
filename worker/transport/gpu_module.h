/*
 * What the GPU backend module (libstagecraft-gpu.so, see kernels/gpu_fn.h) provides to the
 * worker's data plane: the CUDA side of device payloads (transport_devmem.c), the NCCL
 * all-reduce of replicated stages (allreduce_nccl.c) and the nccl stage transport
 * (transport_nccl.c). Programs reach them through gpu_calls.c (rt_dev_*, rt_allreduce_*,
 * rt_gpu_nccl_ops), which looks each up by its name here; nothing else calls them directly.
 */
#ifndef RT_GPU_MODULE_H
#define RT_GPU_MODULE_H

#include "worker/transport/allreduce.h"
#include "worker/transport/transport_impl.h"

sc_status rt_cuda_dev_open(int device, void **stream, sc_err *err);
void rt_cuda_dev_close(void *stream);
sc_status rt_cuda_dev_alloc(int device, size_t bytes, void **out, sc_err *err);
void rt_cuda_dev_release(void *p);
sc_status rt_cuda_dev_copy(int device, void *stream, void *dst, const void *src, size_t bytes,
                           sc_err *err);

sc_status rt_nccl_allreduce_new(rt_allreduce **out, const rt_allreduce_cfg *cfg, sc_err *err);
void rt_nccl_allreduce_destroy(rt_allreduce **a);
const char *rt_nccl_allreduce_endpoint(const rt_allreduce *a);
sc_status rt_nccl_allreduce_connect(rt_allreduce *a, const char *rank0_endpoint, sc_err *err);
sc_status rt_nccl_allreduce_run(rt_allreduce *a, float *dev_grads, size_t n, bool mean,
                                double *scalar, sc_err *err);
void rt_nccl_allreduce_abort(rt_allreduce *a);
int rt_nccl_allreduce_ready(const rt_allreduce *a, uint64_t *ready_ns, int max);

extern const rt_transport_ops rt_transport_nccl_ops;

#endif /* RT_GPU_MODULE_H */
