/*
 * kn gpu backend: finding, loading and binding the GPU backend module. See gpu_backend.h.
 * Invariant: the kernels' function pointers are written once, inside the pthread_once below,
 * before any caller can see a successful load; they never change afterwards (the module is
 * never unloaded).
 */
#include "kernels/gpu_backend.h"

#include <stdio.h>
#include <string.h>

#include "common/sc_util.h"

#ifndef SC_HAVE_CUDA

sc_status kn_gpu_backend_load(sc_err *err)
{
    return SC_ERRF(err, SC_ERR_UNSUPPORTED, "this build has no CUDA (built without the toolkit)");
}

void *kn_gpu_backend_symbol(const char *name)
{
    (void)name;
    return NULL;
}

const char *kn_gpu_backend_path(void)
{
    return "";
}

#else /* SC_HAVE_CUDA */

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/conv2d.h"
#include "kernels/crossentropy.h"
#include "kernels/device_impl.h"
#include "kernels/embedding.h"
#include "kernels/layernorm.h"
#include "kernels/linear.h"
#include "kernels/llama.h"
#include "kernels/optim.h"

/* Every KN_GPU_FN of kernels/: the module exports each under its name. */
#define KN_GPU_FUNCTIONS(X)                                                                        \
    X(kn_cuda_count)                                                                               \
    X(kn_cuda_name)                                                                                \
    X(kn_cuda_capability)                                                                          \
    X(kn_cuda_ctx_open)                                                                            \
    X(kn_cuda_ctx_close)                                                                           \
    X(kn_cuda_alloc)                                                                               \
    X(kn_cuda_free)                                                                                \
    X(kn_cuda_memcpy)                                                                              \
    X(kn_cuda_memset0)                                                                             \
    X(kn_cuda_host_alloc)                                                                          \
    X(kn_cuda_host_free)                                                                           \
    X(kn_cuda_sync)                                                                                \
    X(kn_cuda_enter)                                                                               \
    X(kn_cuda_time_begin)                                                                          \
    X(kn_cuda_time_end)                                                                            \
    X(kn_cuda_error_string)                                                                        \
    X(kn_cuda_marks_new)                                                                           \
    X(kn_cuda_marks_free)                                                                          \
    X(kn_cuda_mark)                                                                                \
    X(kn_cuda_mark_sync)                                                                           \
    X(kn_cuda_mark_elapsed)                                                                        \
    X(kn_embedding_forward_cuda)                                                                   \
    X(kn_embedding_backward_cuda)                                                                  \
    X(kn_layernorm_forward_cuda)                                                                   \
    X(kn_layernorm_backward_cuda)                                                                  \
    X(kn_linear_forward_cuda)                                                                      \
    X(kn_linear_backward_input_cuda)                                                               \
    X(kn_linear_backward_weight_cuda)                                                              \
    X(kn_linear_backward_cuda)                                                                     \
    X(kn_linear_forward_half_out_cuda)                                                             \
    X(kn_linear_backward_input_half_cuda)                                                          \
    X(kn_linear_backward_weight_half_cuda)                                                         \
    X(kn_gelu_forward_cuda)                                                                        \
    X(kn_gelu_backward_cuda)                                                                       \
    X(kn_relu_forward_cuda)                                                                        \
    X(kn_relu_backward_cuda)                                                                       \
    X(kn_residual_forward_cuda)                                                                    \
    X(kn_residual_backward_cuda)                                                                   \
    X(kn_attention_forward_cuda)                                                                   \
    X(kn_attention_backward_cuda)                                                                  \
    X(kn_crossentropy_forward_cuda)                                                                \
    X(kn_crossentropy_backward_cuda)                                                               \
    X(kn_crossentropy_forward_half_cuda)                                                           \
    X(kn_crossentropy_backward_half_cuda)                                                          \
    X(kn_conv2d_forward_cuda)                                                                      \
    X(kn_conv2d_backward_input_cuda)                                                               \
    X(kn_conv2d_backward_weight_cuda)                                                              \
    X(kn_maxpool2d_forward_cuda)                                                                   \
    X(kn_maxpool2d_backward_cuda)                                                                  \
    X(kn_sq_sum_add_cuda)                                                                          \
    X(kn_scale_cuda)                                                                               \
    X(kn_sgd_step_cuda)                                                                            \
    X(kn_adamw_step_cuda)                                                                          \
    X(kn_adamw_multi_cuda)                                                                         \
    X(kn_tok_embed_forward_cuda)                                                                   \
    X(kn_tok_embed_backward_cuda)                                                                  \
    X(kn_rmsnorm_forward_cuda)                                                                     \
    X(kn_rmsnorm_backward_cuda)                                                                    \
    X(kn_rope_cuda)                                                                                \
    X(kn_swiglu_forward_cuda)                                                                      \
    X(kn_swiglu_backward_cuda)                                                                     \
    X(kn_gqa_forward_cuda)                                                                         \
    X(kn_gqa_backward_cuda)

/* the pointers the headers declare */
#define DEFINE_POINTER(f) __typeof__(f) f;
KN_GPU_FUNCTIONS(DEFINE_POINTER)

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void *g_module;
static char g_path[PATH_MAX];
static sc_err g_why; /* the outcome of the load */

/* Tries one candidate file: 1 loaded, 0 no such file, -1 there but unusable (g_why says why). */
static int try_open(const char *path)
{
    if (access(path, F_OK) != 0)
        return 0;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *why = dlerror();
        SC_ERRF(&g_why, SC_ERR_UNSUPPORTED,
                "the GPU backend %s cannot be loaded: %s (it needs the CUDA runtime, cuBLAS and "
                "NCCL libraries of the CUDA toolkit it was built with)",
                path, why != NULL ? why : "unknown reason");
        return -1;
    }
    const char *(*version)(void) = NULL;
    void *sym = dlsym(h, "stagecraft_gpu_module_abi");
    memcpy(&version, &sym, sizeof version);
    const char *have = version != NULL ? version() : "(none)";
    if (strcmp(have, SC_GPU_MODULE_ABI) != 0) {
        SC_ERRF(&g_why, SC_ERR_UNSUPPORTED,
                "the GPU backend %s is of another build (its interface %s, this program's %s): "
                "install the module built with this program",
                path, have, SC_GPU_MODULE_ABI);
        dlclose(h);
        return -1;
    }
#define BIND(f)                                                                                    \
    sym = dlsym(h, #f);                                                                            \
    if (sym == NULL) {                                                                             \
        SC_ERRF(&g_why, SC_ERR_UNSUPPORTED, "the GPU backend %s lacks %s", path, #f);              \
        dlclose(h);                                                                                \
        return -1;                                                                                 \
    }                                                                                              \
    memcpy(&f, &sym, sizeof f);
    KN_GPU_FUNCTIONS(BIND)
#undef BIND
    g_module = h;
    if (realpath(path, g_path) == NULL)
        sc_strlcpy(g_path, path, sizeof g_path);
    return 1;
}

static void load_once(void)
{
    const char *env = getenv(KN_GPU_BACKEND_ENV);
    if (env != NULL && env[0] != '\0') {
        if (try_open(env) == 0)
            SC_ERRF(&g_why, SC_ERR_UNSUPPORTED, "%s=%s: no such file", KN_GPU_BACKEND_ENV, env);
        return;
    }
    char exe[PATH_MAX], dir[PATH_MAX] = "";
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash != NULL) {
            *slash = '\0';
            sc_strlcpy(dir, exe, sizeof dir);
        }
    }
    char cand[3][PATH_MAX];
    int nc = 0;
    if (dir[0] != '\0') {
        snprintf(cand[nc++], PATH_MAX, "%s/" KN_GPU_BACKEND_FILE, dir);
        snprintf(cand[nc++], PATH_MAX, "%s/../lib/stagecraft/" KN_GPU_BACKEND_FILE, dir);
    }
    snprintf(cand[nc++], PATH_MAX, "%s", SC_GPU_MODULE_BUILD_PATH);
    for (int i = 0; i < nc; i++)
        if (try_open(cand[i]) != 0)
            return; /* loaded, or there and unusable: g_why says which */
    SC_ERRF(&g_why, SC_ERR_UNSUPPORTED,
            "no GPU backend (" KN_GPU_BACKEND_FILE ") beside the program, in "
            "../lib/stagecraft/ or in the build tree; set %s to its path",
            KN_GPU_BACKEND_ENV);
}

sc_status kn_gpu_backend_load(sc_err *err)
{
    pthread_once(&g_once, load_once);
    if (g_module != NULL)
        return SC_OK;
    if (err != NULL)
        *err = g_why;
    return g_why.code;
}

void *kn_gpu_backend_symbol(const char *name)
{
    if (kn_gpu_backend_load(NULL) != SC_OK)
        return NULL;
    return dlsym(g_module, name);
}

const char *kn_gpu_backend_path(void)
{
    return kn_gpu_backend_load(NULL) == SC_OK ? g_path : "";
}

#endif /* SC_HAVE_CUDA */
