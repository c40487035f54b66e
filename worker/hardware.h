/*
 * The hardware report a worker sends when it registers: its host (cores, memory, NIC), the one
 * device it drives (`cpu` or `cuda:N`), and its topology as hwloc XML for the coordinator's
 * cluster model. Built from topology discovery on the live machine.
 */
#ifndef WK_HARDWARE_H
#define WK_HARDWARE_H

#include <stdbool.h>

#include "common/sc_status.h"
#include "proto/stagecraft.pb-c.h"

/* Parses "cpu" or "cuda:N" (N >= 0). SC_ERR_INVALID names what would be valid. */
sc_status wk_device_parse(const char *device, bool *is_cuda, int *index, sc_err *err);

/* Discovers this machine and fills a heap-allocated report for `device` (free with
 * wk_hardware_free). `measure` runs the short bandwidth and GEMM probes. SC_ERR_NOT_FOUND when
 * the machine has no such CUDA device. `nccl` is set for a CUDA device in a build with NCCL. */
sc_status wk_hardware_report(const char *device, bool measure, Stagecraft__HardwareReport **out,
                             sc_err *err);

void wk_hardware_free(Stagecraft__HardwareReport **report);

#endif /* WK_HARDWARE_H */
