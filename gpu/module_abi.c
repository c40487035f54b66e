/*
 * The GPU backend module's interface name, which kernels/gpu_backend.c compares with its own
 * before binding anything: a module from another build (other headers, other version) is
 * refused rather than called with the wrong types.
 */
const char *stagecraft_gpu_module_abi(void);

const char *stagecraft_gpu_module_abi(void)
{
    return SC_GPU_MODULE_ABI;
}
