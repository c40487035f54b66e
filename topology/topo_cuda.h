/*
 * topo_cuda: the CUDA driver (libcuda.so.1), and cuBLAS for one probe, loaded at run time with
 * dlopen, so one stagecraft binary runs on machines with and without a GPU.
 *
 * It lists the devices the driver sees with the properties the planner needs (name, memory, SM
 * count, compute capability, PCI bus id), and runs short probes on one device: host-to-device
 * and device-to-device copy rates and a single-precision GEMM rate (cuBLAS when it can be
 * loaded).
 *
 * What it does not do: it never links CUDA at build time and never keeps a context alive
 * after a probe; it does not choose devices for work (the worker does).
 *
 * Key invariant: every failure to find or use CUDA is an SC_ERR_UNAVAILABLE or SC_ERR_CUDA
 * status with a message, never a crash; callers treat CUDA as optional.
 */
#ifndef SC_TOPO_CUDA_H
#define SC_TOPO_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "common/sc_status.h"

typedef struct topo_cuda topo_cuda;

typedef struct topo_cuda_dev {
    char name[128];
    char pci_bus_id[16]; /* normalised "dddd:bb:dd.f", lower-case hex */
    uint64_t memory_bytes;
    int sm_count;
    int cc_major, cc_minor;
    int clock_khz;
} topo_cuda_dev;

/* Loads the driver and lists its devices. SC_ERR_UNAVAILABLE when the library is missing, it
 * does not initialise (no device, no kernel module) or it sees no device. */
sc_status topo_cuda_open(topo_cuda **out, sc_err *err);
void topo_cuda_close(topo_cuda **cuda);

int topo_cuda_count(const topo_cuda *cuda);
const topo_cuda_dev *topo_cuda_device(const topo_cuda *cuda, int ordinal);

/* Short probes on device `ordinal` (a few hundred milliseconds). Any of the outputs may be
 * NULL. A probe that cannot run leaves its output 0; the status reports the first failure. */
sc_status topo_cuda_measure(topo_cuda *cuda, int ordinal, double *h2d_bytes_per_s,
                            double *d2d_bytes_per_s, double *gemm_gflops, sc_err *err);

/* Rewrites a PCI bus id ("00000000:3B:00.0", "0000:3b:00.0") as "dddd:bb:dd.f" in lower
 * case. Returns false when `in` is not a bus id. */
int topo_busid_normalise(const char *in, char *out, size_t size);

#endif /* SC_TOPO_CUDA_H */
