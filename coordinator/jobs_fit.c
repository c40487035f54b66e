/*
 * Whether a job's model can be trained on the workers chosen for it at all, from its memory
 * model, before any worker profiles it: the weights, gradients and optimizer state of every
 * parameter must fit in the workers' memory together, and each block (the planner never cuts
 * one) in a single worker's. A model that fails this fails its job at once with a message that
 * says so, instead of being profiled block by block on a worker that cannot hold it.
 *
 * It does not count activations or workspace, so it refuses only what certainly cannot fit;
 * the planner's memory model and profiling judge the rest.
 */
#include <stdio.h>
#include <string.h>

#include "coordinator/jobs_internal.h"
#include "proto/stagecraft.pb-c.h"

uint64_t coord_jobs_train_bytes_per_param(const coord_jobspec *spec)
{
    uint64_t state = 0;
    if (strcmp(spec->optimizer, "adamw") == 0)
        state = 8;
    else if (spec->momentum > 0)
        state = 4;
    return 4 + 4 + state;
}

/* The memory a worker trains in: its devices' together (a GPU server's GPUs; a CPU worker's one
 * device, which is host memory), else the host's. */
static uint64_t worker_memory_bytes(const Stagecraft__HardwareReport *hw)
{
    if (hw == NULL)
        return 0;
    uint64_t sum = 0;
    for (size_t d = 0; d < hw->n_devices; d++)
        sum += hw->devices[d]->memory_bytes;
    return sum > 0 ? sum : hw->host_memory_bytes;
}

sc_status coord_jobs_check_fit(const coord_jobspec *spec, const coord_chosen_worker *ws, size_t n,
                               sc_err *err)
{
    uint64_t per = coord_jobs_train_bytes_per_param(spec), total = 0, largest = 0;
    const char *largest_name = "";
    for (size_t i = 0; i < n; i++) {
        uint64_t m = worker_memory_bytes(ws[i].hw);
        if (m == 0)
            return SC_OK; /* a worker that does not say: profiling will tell */
        total += m;
        if (m > largest) {
            largest = m;
            largest_name = ws[i].name;
        }
    }
    if (n == 0)
        return SC_OK;
    double need = (double)spec->param_count * (double)per;
    double block = (double)spec->max_block_params * (double)per;
    const double gb = 1e9;
    if (need > (double)total)
        return SC_ERRF(err, SC_ERR_TOO_LARGE,
                       "the model does not fit on the %zu worker(s) chosen: its %.3g parameters "
                       "need %.1f GB to train with %s (%llu bytes each: weight, gradient and "
                       "optimizer state, activations not counted) and the workers have %.1f GB "
                       "together; valid: a smaller model (fewer layers or a smaller width), or "
                       "more or larger workers (\"workers\")",
                       n, (double)spec->param_count, need / gb, spec->optimizer,
                       (unsigned long long)per, (double)total / gb);
    if (block > (double)largest)
        return SC_ERRF(err, SC_ERR_TOO_LARGE,
                       "the model does not fit on a worker: its largest block has %.3g "
                       "parameters, which need %.1f GB to train with %s, and a block is never "
                       "cut, but the largest worker chosen (%s) has %.1f GB; valid: a smaller "
                       "width, or a worker with more memory",
                       (double)spec->max_block_params, block / gb, spec->optimizer, largest_name,
                       (double)largest / gb);
    return SC_OK;
}
