/*
 * wk_transport_bytes_per_cpu_s: the CPU cost of this worker's data-plane transfers, measured
 * once when it reports its hardware (transport_rate.c). Not here: the transports themselves
 * (worker/transport/).
 */
#ifndef WK_TRANSPORT_RATE_H
#define WK_TRANSPORT_RATE_H

/* Bytes that one CPU second sends and receives over ZeroMQ TCP on loopback (each byte sent by
 * one socket and received by another of this process, 24 MiB in 1 MiB messages); 0 when it
 * cannot be measured. Takes tens of milliseconds of CPU. */
double wk_transport_bytes_per_cpu_s(void);

#endif /* WK_TRANSPORT_RATE_H */
