/*
 * The Coordinator gRPC service: the method table the coordinator's RPC server serves
 * (RegisterWorker, SubmitJob, GetJob, ListJobs, CancelJob, ListWorkers, GetTrace, GetCheckpoint).
 *
 * Each handler expects the coordinator as its method's user pointer: coord_new copies the table
 * and sets it. The handlers do not start or drive jobs: they change the store and wake the
 * driver.
 */
#ifndef COORD_SERVICE_H
#define COORD_SERVICE_H

#include <stddef.h>

#include "proto/sc_rpc.h"

extern const sc_rpc_method coord_service_methods[];
extern const size_t coord_service_n_methods;

struct coord;

/* Answers `method` ("/stagecraft.Coordinator/ListWorkers") in process, as the RPC would, for
 * the coordinator's other front ends (its HTTP view): the same handler, the same locks, the
 * same answer. The call carries no token, so methods that want one refuse (SC_ERR_PERMISSION).
 * On SC_OK *resp lives until sc_rpc_local_free(call). SC_ERR_NOT_FOUND for an unknown method;
 * otherwise the handler's own error. Safe from any thread but the coordinator's control loop's
 * holders of c->lock (the handlers take it). */
sc_status coord_service_call(struct coord *c, const char *method, const ProtobufCMessage *req,
                             const char *peer, sc_rpc_local **call, ProtobufCMessage **resp,
                             sc_err *err);

#endif /* COORD_SERVICE_H */
