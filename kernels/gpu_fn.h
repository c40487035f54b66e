/*
 * KN_GPU_FN: how a function of the GPU backend is declared. The CUDA code (kernels/ .cu files,
 * the nccl transport) is built into a module of its own, libstagecraft-gpu.so, that programs
 * load at run time (kernels/gpu_backend.c) when a CUDA device is asked for, so the coordinator,
 * `plan` and CPU workers run on hosts without the CUDA libraries.
 *
 * Inside the module (SC_GPU_MODULE) a declaration is the function's prototype. Everywhere else it
 * is a pointer of the same type, filled when the module is loaded; calls read the same either
 * way. A pointer is NULL until then: only code that holds a CUDA context (which loading makes
 * possible) may call one. Plain C that also compiles as C++ (nvcc).
 */
#ifndef KN_GPU_FN_H
#define KN_GPU_FN_H

#ifdef SC_GPU_MODULE
#define KN_GPU_FN(ret, name, params) ret name params
#else
#define KN_GPU_FN(ret, name, params) extern ret(*name) params
#endif

#endif /* KN_GPU_FN_H */
