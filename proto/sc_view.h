/*
 * The JSON views of the Coordinator service's answers: the objects `stagecraft status --json`
 * and `stagecraft workers --json` print and the coordinator's HTTP /api serves, built here once
 * so that the two can never drift apart.
 *
 * Deliberately not here: fetching (the caller holds the decoded message, from an RPC or from an
 * in-process call), printing, or any figure the message does not carry.
 *
 * Key invariant: a view is a pure function of its message; the same message gives the same JSON.
 */
#ifndef SC_VIEW_H
#define SC_VIEW_H

#include <jansson.h>
#include <stdbool.h>

#include "proto/stagecraft.pb-c.h"

/* "submitted", "profiling", ... "cancelled"; "unknown" for a value this build does not know. */
const char *sc_view_job_state_name(Stagecraft__JobState s);

/* "alive", "suspect", "dead"; "unknown" otherwise. */
const char *sc_view_worker_state_name(Stagecraft__WorkerState s);

/* A figure that may not be measured yet: the number, or JSON null when !known. */
json_t *sc_view_figure(bool known, double v);

/* The job object of `status --json` (a listing's entry, or GetJob's fuller one). New reference,
 * NULL only when out of memory; the message is only read. */
json_t *sc_view_job(const Stagecraft__JobInfo *j);

/* The time job j spent profiling, from its history: every stretch from a transition to
 * "profiling" to the next transition (up to now when it still profiles); *rounds counts them. */
double sc_view_profiling_s(const Stagecraft__JobInfo *j, int *rounds);

/* One entry of `workers --json`'s "workers" array. New reference, as sc_view_job. */
json_t *sc_view_worker(const Stagecraft__WorkerInfo *w);

/* A job's training series (GetJob with history): [{"step", "loss", "samples_per_s",
 * "iteration_s", "at_unix_ms"}...], oldest first; a figure not measured (or a loss that is not
 * finite) is null. New reference. */
json_t *sc_view_history(const Stagecraft__JobInfo *j);

/* GetLogs' answer: {"workers": [{"worker_id", "name", "lines": [{"seq", "text"}...] (oldest
 * first), "newest_seq", "error" (null when it answered)}...]}. New reference. */
json_t *sc_view_logs(const Stagecraft__GetLogsResponse *resp);

/* The cluster as the coordinator knows it (sc_view_cluster.c): {"servers": [{"host", "workers":
 * [sc_view_worker...], "devices", "memory_bytes"}...] (in the order their first worker
 * registered), "coordinator_links": [{"worker_id", "name", "host", "bytes_per_s", "latency_s",
 * "probed_unix_ms"}...] (each worker's path to the coordinator as last probed; probed ones
 * only), "worker_links": [{"job_id", "from", "to", "from_host", "to_host",
 * "measured_bytes_per_s", "expected_bytes_per_s", "reference_bytes_per_s", "message_bytes",
 * "message_s", "samples"}...] (the links between workers that the given jobs measure as they
 * train; message_s: one message's transit at the measured speed, null when unmeasured)}.
 * `jobs` (n_jobs) are GetJob's objects (a listing's carry no links). New reference. */
json_t *sc_view_cluster(const Stagecraft__ListWorkersResponse *workers,
                        const Stagecraft__JobInfo *const *jobs, size_t n_jobs);

/* {"jobs": [...]} and {"workers": [...]}: the whole documents the two commands print. */
json_t *sc_view_jobs(const Stagecraft__ListJobsResponse *resp);
json_t *sc_view_workers(const Stagecraft__ListWorkersResponse *resp);

#endif /* SC_VIEW_H */
