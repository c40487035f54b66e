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

#endif /* COORD_SERVICE_H */
