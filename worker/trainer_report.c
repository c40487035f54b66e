/*
 * wk trainer, reports: the queue of messages the training thread leaves for the control loop
 * (iteration reports and errors), and the figures an iteration report carries beyond the
 * runner's own (checkpoint copies held, link transfers with the clock they were read on, the
 * all-reduce).
 *
 * The bottom of the trainer's files: calls none of them. Invariant: a queued message's buffers
 * belong to the queue until popped, then to the caller, who frees them with
 * wk_trainer_msg_clear.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_log.h"
#include "common/sc_util.h"
#include "worker/trainer_internal.h"

#define LOG WK_TRAINER_LOG

void wk_trainer_push(wk_trainer *t, wk_trainer_msg *m)
{
    pthread_mutex_lock(&t->lock);
    if (t->count == WK_TRAINER_QUEUE_MAX) { /* the control loop is behind: drop the oldest report */
        wk_trainer_msg_clear(&t->queue[t->head]);
        t->head = (t->head + 1) % WK_TRAINER_QUEUE_MAX;
        t->count--;
    }
    m->run = t->run;
    m->report.run = t->run;
    t->queue[(t->head + t->count) % WK_TRAINER_QUEUE_MAX] = *m;
    t->count++;
    pthread_mutex_unlock(&t->lock);
}

bool wk_trainer_pop(wk_trainer *t, wk_trainer_msg *out)
{
    pthread_mutex_lock(&t->lock);
    bool any = t->count > 0;
    if (any) {
        *out = t->queue[t->head];
        t->head = (t->head + 1) % WK_TRAINER_QUEUE_MAX;
        t->count--;
    }
    pthread_mutex_unlock(&t->lock);
    return any;
}

void wk_trainer_msg_clear(wk_trainer_msg *m)
{
    free(m->report.grad_l1_per_block);
    m->report.grad_l1_per_block = NULL;
    m->report.n_grad_l1_per_block = 0;
    if (m->report.checkpoint_error != protobuf_c_empty_string)
        free(m->report.checkpoint_error);
    m->report.checkpoint_error = NULL;
    free(m->report.checkpoint_copies); /* one block: the pointers, then the messages */
    m->report.checkpoint_copies = NULL;
    m->report.n_checkpoint_copies = 0;
    free(m->report.links); /* one block, as the copies */
    m->report.links = NULL;
    m->report.n_links = 0;
    free(m->report.reduce); /* one block: the timing, the peers' pointers, the peers */
    m->report.reduce = NULL;
}

void wk_trainer_push_error(wk_trainer *t, sc_status code, const char *fmt, const char *msg)
{
    wk_trainer_msg m;
    memset(&m, 0, sizeof m);
    m.is_error = true;
    m.code = code;
    sc_strfmt(m.error, sizeof m.error, fmt, msg);
    SC_LOG_WARN(LOG, "%s", m.error);
    wk_trainer_push(t, &m);
}

/* A report of this stage after `step`, its other figures zero. */
void wk_trainer_report_init(const wk_trainer *t, uint64_t step, wk_trainer_msg *m)
{
    memset(m, 0, sizeof *m);
    stagecraft__iteration_report__init(&m->report);
    m->report.stage = t->stage;
    m->report.replica = t->replica;
    m->report.step = step;
}

/* Puts the copies this worker holds of other stages' checkpoints in report r (none when there
 * are none or memory is short: the coordinator keeps what it last heard). */
void wk_trainer_report_copies(wk_trainer *t, Stagecraft__IterationReport *r)
{
    wk_copy_held held[WK_COPIER_MAX];
    size_t n = wk_copier_held(t->copier, held, WK_COPIER_MAX);
    if (n == 0)
        return;
    char *block =
        malloc(n * (sizeof(Stagecraft__CheckpointCopy *) + sizeof(Stagecraft__CheckpointCopy)));
    if (block == NULL)
        return;
    Stagecraft__CheckpointCopy **ptrs = (Stagecraft__CheckpointCopy **)block;
    Stagecraft__CheckpointCopy *msgs =
        (Stagecraft__CheckpointCopy *)(block + n * sizeof(Stagecraft__CheckpointCopy *));
    for (size_t i = 0; i < n; i++) {
        stagecraft__checkpoint_copy__init(&msgs[i]);
        msgs[i].stage = held[i].stage;
        msgs[i].copy = held[i].copy;
        msgs[i].step = held[i].step;
        ptrs[i] = &msgs[i];
    }
    r->checkpoint_copies = ptrs;
    r->n_checkpoint_copies = n;
}

/* The kernel's boot id: workers that report the same one read one monotonic clock, so the
 * delays their links measure are transits as they stand ("" where it cannot be read). */
static char g_clock_id[48];
static pthread_once_t g_clock_once = PTHREAD_ONCE_INIT;

static void clock_id_read(void)
{
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f == NULL)
        return;
    if (fgets(g_clock_id, sizeof g_clock_id, f) == NULL)
        g_clock_id[0] = '\0';
    g_clock_id[strcspn(g_clock_id, "\n")] = '\0';
    fclose(f);
}

/* Puts the step's transfer figures (rt_report.links) in report r (none when memory is short). */
void wk_trainer_report_links(const rt_report *rep, Stagecraft__IterationReport *r)
{
    pthread_once(&g_clock_once, clock_id_read);
    r->clock_id = g_clock_id; /* static: never freed */
    size_t n = rep->n_links > 0 ? (size_t)rep->n_links : 0;
    if (n == 0)
        return;
    char *block =
        malloc(n * (sizeof(Stagecraft__LinkTransfer *) + sizeof(Stagecraft__LinkTransfer)));
    if (block == NULL)
        return;
    Stagecraft__LinkTransfer **ptrs = (Stagecraft__LinkTransfer **)block;
    Stagecraft__LinkTransfer *msgs =
        (Stagecraft__LinkTransfer *)(block + n * sizeof(Stagecraft__LinkTransfer *));
    for (size_t i = 0; i < n; i++) {
        const rt_link_sample *l = &rep->links[i];
        stagecraft__link_transfer__init(&msgs[i]);
        msgs[i].from_next = l->from_next;
        msgs[i].from_replica = l->from_copy > 0 ? (uint32_t)l->from_copy : 0;
        msgs[i].messages = l->messages;
        msgs[i].clean = l->clean;
        msgs[i].bytes = l->bytes;
        msgs[i].delay_s = l->delay_s;
        ptrs[i] = &msgs[i];
    }
    r->links = ptrs;
    r->n_links = n;
}

/* Puts the step's all-reduce figures (rt_report.reduce) in report r (none when nothing was
 * measured or memory is short). */
void wk_trainer_report_reduce(const rt_report *rep, Stagecraft__IterationReport *r)
{
    const rt_reduce_sample *x = &rep->reduce;
    if (x->count == 0)
        return;
    size_t n = x->n_peers > 0 ? (size_t)x->n_peers : 0;
    char *block = malloc(sizeof(Stagecraft__ReduceTiming) +
                         n * (sizeof(Stagecraft__ReducePeer *) + sizeof(Stagecraft__ReducePeer)));
    if (block == NULL)
        return;
    Stagecraft__ReduceTiming *t = (Stagecraft__ReduceTiming *)block;
    Stagecraft__ReducePeer **ptrs = (Stagecraft__ReducePeer **)(block + sizeof *t);
    Stagecraft__ReducePeer *peers =
        (Stagecraft__ReducePeer *)(block + sizeof *t + n * sizeof *ptrs);
    stagecraft__reduce_timing__init(t);
    t->count = x->count;
    t->bytes = x->bytes;
    t->own_s = x->own_s;
    for (size_t i = 0; i < n; i++) {
        stagecraft__reduce_peer__init(&peers[i]);
        peers[i].copy = (uint32_t)x->peer_copy[i];
        peers[i].delay_s = x->peer_delay_s[i];
        ptrs[i] = &peers[i];
    }
    t->peers = n > 0 ? ptrs : NULL;
    t->n_peers = n;
    r->reduce = t;
}
