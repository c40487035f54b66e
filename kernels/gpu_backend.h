/*
 * kn gpu backend: loads the GPU backend module (libstagecraft-gpu.so: the CUDA kernels, cuBLAS,
 * the nccl transport) at run time, once, and binds the kernels' GPU functions (KN_GPU_FN). A
 * program of a CUDA build therefore starts, plans and trains on CPUs where the CUDA libraries
 * are absent; only asking for a CUDA device needs them.
 *
 * Where the module is looked for, first found wins: the file named by STAGECRAFT_GPU_BACKEND
 * (then nowhere else); libstagecraft-gpu.so beside the program; ../lib/stagecraft/ from the
 * program's folder (an installed tree); the build tree the program was built in.
 * Not here: what the module contains (gpu/), the worker's GPU functions (worker/transport/
 * gpu_calls.c, which asks this file for their addresses).
 */
#ifndef KN_GPU_BACKEND_H
#define KN_GPU_BACKEND_H

#include "common/sc_status.h"

#define KN_GPU_BACKEND_FILE "libstagecraft-gpu.so"
#define KN_GPU_BACKEND_ENV "STAGECRAFT_GPU_BACKEND"

/* Loads the module and binds every kernel function; the first call decides, later calls give
 * the same outcome (thread-safe). SC_ERR_UNSUPPORTED in a build without CUDA, or when the module
 * or a library it needs (libcudart, libcublas, libnccl) cannot be loaded, or the module is of
 * another build: the message names the file and the loader's reason. err may be NULL. */
sc_status kn_gpu_backend_load(sc_err *err);

/* The address of `name` in the loaded module; NULL before a successful load or when absent. */
void *kn_gpu_backend_symbol(const char *name);

/* The file the module was loaded from, "" before a successful load. */
const char *kn_gpu_backend_path(void);

#endif /* KN_GPU_BACKEND_H */
