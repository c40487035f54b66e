/*
 * The questions the HTTP routes ask the Coordinator service, in process (http_internal.h): the
 * same handlers, locks and answers as the CLI's RPCs, so the page and `status --json` agree.
 */
#include <stdlib.h>

#include "coordinator/coord_internal.h"
#include "coordinator/http_internal.h"
#include "coordinator/service.h"

sc_status coord_http_fetch_workers(coord_http *h, sc_rpc_local **call,
                                   const Stagecraft__ListWorkersResponse **resp, sc_err *err)
{
    ProtobufCMessage *m;
    Stagecraft__ListWorkersRequest req = STAGECRAFT__LIST_WORKERS_REQUEST__INIT;
    SC_CHECK(coord_service_call(h->coord, "/stagecraft.Coordinator/ListWorkers", &req.base, "http",
                                call, &m, err));
    *resp = (const Stagecraft__ListWorkersResponse *)m;
    return SC_OK;
}

bool coord_http_job_is_live(Stagecraft__JobState s)
{
    return s != STAGECRAFT__JOB_STATE__JOB_SUCCEEDED && s != STAGECRAFT__JOB_STATE__JOB_FAILED &&
           s != STAGECRAFT__JOB_STATE__JOB_CANCELLED;
}

sc_status coord_http_fetch_jobs(coord_http *h, coord_http_jobs *out, sc_err *err)
{
    *out = (coord_http_jobs){0};
    ProtobufCMessage *m;
    Stagecraft__ListJobsRequest req = STAGECRAFT__LIST_JOBS_REQUEST__INIT;
    SC_CHECK(coord_service_call(h->coord, "/stagecraft.Coordinator/ListJobs", &req.base, "http",
                                &out->list_call, &m, err));
    const Stagecraft__ListJobsResponse *list = (const void *)m;
    size_t n = list->n_jobs;
    out->jobs = calloc(n ? n : 1, sizeof *out->jobs);
    out->calls = calloc(n ? n : 1, sizeof *out->calls);
    if (out->jobs == NULL || out->calls == NULL) {
        coord_http_jobs_free(out);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory listing the jobs");
    }
    out->n = n;
    for (size_t i = 0; i < n; i++) {
        out->jobs[i] = list->jobs[i];
        if (!coord_http_job_is_live(list->jobs[i]->state))
            continue;
        Stagecraft__GetJobRequest g = STAGECRAFT__GET_JOB_REQUEST__INIT;
        g.job_id = list->jobs[i]->job_id;
        ProtobufCMessage *jm;
        sc_err e;
        sc_err_clear(&e);
        /* a job that ends between the two calls keeps its listing's entry */
        if (coord_service_call(h->coord, "/stagecraft.Coordinator/GetJob", &g.base, "http",
                               &out->calls[i], &jm, &e) == SC_OK)
            out->jobs[i] = ((const Stagecraft__GetJobResponse *)jm)->job;
    }
    return SC_OK;
}

void coord_http_jobs_free(coord_http_jobs *j)
{
    for (size_t i = 0; j->calls != NULL && i < j->n; i++)
        sc_rpc_local_free(&j->calls[i]);
    free(j->calls);
    free(j->jobs);
    sc_rpc_local_free(&j->list_call);
    *j = (coord_http_jobs){0};
}

bool coord_http_rpc_calls(coord_http *h, size_t i, const char **method, unsigned long *calls)
{
    /* the server is thread-safe and lives as long as the coordinator (coord_internal.h) */
    return h->coord->rpc != NULL && sc_rpc_server_calls(h->coord->rpc, i, method, calls);
}
