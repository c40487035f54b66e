/*
 * wk trainer, fault injection: the faults a test asks a worker for (STAGECRAFT_WORKER_FAULTS,
 * set up by the agent): a stage whose step hangs until released by a signal.
 *
 * Nothing here runs unless a test asked for it. Calls none of the trainer's other files.
 */
#include <signal.h>
#include <stdatomic.h>
#include <unistd.h>

#include "common/sc_log.h"
#include "worker/trainer_internal.h"

#define LOG WK_TRAINER_LOG

/* wk_trainer_fault_release's flag: set from a signal handler */
static volatile sig_atomic_t hang_released;

void wk_trainer_fault_release(void)
{
    hang_released = 1;
}

void wk_trainer_fault_hang(wk_trainer *t, uint64_t after_steps)
{
    t->hang_after = after_steps;
}

/* The step of a test's fault: stuck, stop or not, until released. */
void wk_trainer_fault_hang_step(wk_trainer *t, uint64_t step)
{
    SC_LOG_WARN(LOG, "fault injection: job %s stage %u hangs in step %llu", t->job_id, t->stage,
                (unsigned long long)step);
    while (!hang_released)
        usleep(20 * 1000);
    SC_LOG_WARN(LOG, "fault injection: job %s stage %u wakes up in step %llu%s", t->job_id,
                t->stage, (unsigned long long)step,
                atomic_load(&t->stop) ? ", stopped meanwhile: it ends" : "");
    t->hang_after = 0;
}
