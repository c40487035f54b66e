/*
 * kn threads: how many threads the CPU fast path uses in this process (the BLAS products and
 * the threaded elementwise loops). One setting per process, as the BLAS keeps one.
 * Default: the cores this process may run on, its affinity mask capped by its cgroup's CPU
 * quota (cgroup v2 cpu.max, or v1 cpu.cfs_quota_us / cpu.cfs_period_us), rounded up; so a
 * worker started in a 3-core cgroup or under `taskset -c 0-3` uses 3 or 4 threads.
 * kn_cpu_parallel_for runs the fast path's elementwise loops on those threads.
 * Not here: which kernels run (the context decides: device.h), or pinning threads to cores.
 */
#ifndef KN_THREADS_CPU_H
#define KN_THREADS_CPU_H

#include <stdbool.h>
#include <stddef.h>

#include "common/sc_status.h"

/* Most threads kn_cpu_set_threads accepts. */
#define KN_CPU_THREADS_MAX 1024

/* True when the CPU matrix products run on a BLAS (the build found OpenBLAS). */
bool kn_built_with_blas(void);

/* The cores this process may use: its affinity mask, capped by a cgroup CPU quota (>= 1). */
int kn_cpu_cores_available(void);

/* The CFS CPU quota of this process's cgroup, the smallest on its path (cgroup v2 cpu.max, v1
 * cpu.cfs_quota_us / cpu.cfs_period_us), against the threads in use (kn_cpu_threads): true
 * when it holds them back (quota cores < threads), with *cores = quota / period (0.45: 45% of
 * one core in each period), *fraction = cores / threads in (0, 1) and *period_s the period;
 * false when there is no quota, one the threads cannot reach, or it cannot be read (a network
 * namespace entered with `ip netns exec` hides /sys/fs/cgroup). */
bool kn_cpu_quota_binding(double *fraction, double *cores, double *period_s);

/* Sets the thread count for the rest of the process; 0 restores the default above. Outside
 * [0, KN_CPU_THREADS_MAX] is SC_ERR_INVALID naming `what` ("--threads") and the valid range. */
sc_status kn_cpu_set_threads(int n, const char *what, sc_err *err);

/* The thread count in use (the default on first use). */
int kn_cpu_threads(void);

/* Unless kn_cpu_set_threads fixed a count: reads the cores this process may use again (its
 * cgroup's quota may have changed: a Kubernetes in-place resize, `docker update --cpus`,
 * `systemctl set-property CPUQuota=`) at most once a second, and follows it. Returns the new
 * count when it changed, else 0. Call it between computations, from the thread that runs them
 * (a worker's stage between steps, its profiler before measuring), never inside one. */
int kn_cpu_threads_follow_quota(void);

/* Makes the BLAS products this thread runs next use the process's thread count. The fast
 * kernels call it before their products: OpenBLAS's OpenMP variant takes the count from the
 * calling thread's OpenMP setting (OMP_NUM_THREADS, else every core), not from the process's,
 * so a worker's compute thread would otherwise ignore --threads and the cgroup's quota. Nothing
 * with another BLAS, inside kn_cpu_blas_serial_begin/_end, or inside a range of
 * kn_cpu_parallel_for. */
void kn_cpu_blas_use_threads(void);

/* The threads the BLAS ran its last product on (OpenBLAS's own count), 1 without a BLAS. */
int kn_cpu_blas_threads(void);

/* The BLAS on one thread until kn_cpu_blas_serial_end with what begin returned (the process's
 * thread count): for loops whose ranges each call the BLAS on products too small to split. The
 * setting is the process's: products other threads run meanwhile get one thread too (slower,
 * the same results). */
int kn_cpu_blas_serial_begin(void);
void kn_cpu_blas_serial_end(int n);

/* fn(arg, begin, end) over [0, n) cut into at most kn_cpu_threads() ranges of at least `grain`
 * elements, run at once on the process's threads (the caller runs the first range): OpenMP's,
 * the BLAS's own, where the BLAS is OpenBLAS's OpenMP variant, else a pool of ours; in a forked
 * child always a pool of its own, and there the BLAS on one thread (see threads_cpu.c),
 * returning when all are done. One range, on the caller, when n < 2 * grain, with one thread,
 * or while another thread of the process holds the pool (a second stage computing at the same
 * time, or a range of a call in progress calling it again). The ranges must touch disjoint
 * memory. */
typedef void (*kn_range_fn)(void *arg, size_t begin, size_t end);
void kn_cpu_parallel_for(size_t n, size_t grain, kn_range_fn fn, void *arg);

#endif /* KN_THREADS_CPU_H */
