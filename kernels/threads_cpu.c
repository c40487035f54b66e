/*
 * kn threads: the process's CPU thread count and its default from the affinity mask and the
 * cgroup CPU quota (threads_cpu.h), applied to OpenBLAS when the build has it; and the threads
 * that run kn_cpu_parallel_for's ranges. Where the OpenBLAS loaded at run time is its OpenMP
 * variant, the ranges run on OpenMP's threads, the same ones as the BLAS's products, so that two
 * sets of threads never share the cores while each waits for work; with any other BLAS, on a
 * pool of threads started on first need and asleep on a condition variable between calls. A
 * forked child (a process that forks without exec after computing) has neither set of its
 * parent's threads: it starts its own pool and runs the BLAS on one thread.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "kernels/threads_cpu.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
#include <unistd.h>

#ifdef SC_HAVE_BLAS
#include <cblas.h>
#endif
#if defined(SC_HAVE_BLAS) && defined(_OPENMP)
#define SC_BLAS_OPENMP_POSSIBLE 1 /* built with OpenMP: the BLAS found at run time may use it */
#include <omp.h>
#endif

bool kn_built_with_blas(void)
{
#ifdef SC_HAVE_BLAS
    return true;
#else
    return false;
#endif
}

/* Reads the first line of `path` into buf; false when it cannot be read. */
static bool read_line(const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    bool ok = fgets(buf, (int)size, f) != NULL;
    fclose(f);
    return ok;
}

/* The smallest CFS quota on the cgroup path of this process and its ancestors (v2: cpu.max;
 * v1: the cpu controller's cfs files), in cores (quota / period) with its period; false when
 * there is none. */
static bool cgroup_quota(double *cores, double *period_s)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (f == NULL)
        return false;
    char line[4096], dir[4096 + 64];
    bool found = false;
    while (fgets(line, sizeof line, f) != NULL) {
        /* "0::/path" (v2) or "N:cpu,cpuacct:/path" (v1) */
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (c2 == NULL)
            continue;
        *c2 = '\0';
        const char *ctrl = c1 + 1, *path = c2 + 1;
        bool v2 = ctrl[0] == '\0';
        bool v1cpu = !v2 && (strcmp(ctrl, "cpu") == 0 || strncmp(ctrl, "cpu,", 4) == 0 ||
                             strstr(ctrl, ",cpu,") != NULL ||
                             (strlen(ctrl) > 4 && strcmp(ctrl + strlen(ctrl) - 4, ",cpu") == 0));
        if (!v2 && !v1cpu)
            continue;
        char rel[4096];
        snprintf(rel, sizeof rel, "%s", path);
        rel[strcspn(rel, "\n")] = '\0';
        for (;;) {
            char buf[128];
            long long q = 0, p = 0;
            if (v2) {
                snprintf(dir, sizeof dir, "/sys/fs/cgroup%s/cpu.max", rel);
                if (!read_line(dir, buf, sizeof buf) || sscanf(buf, "%lld %lld", &q, &p) != 2)
                    q = p = 0; /* "max PERIOD": no quota */
            } else {
                char qs[128], ps[128];
                snprintf(dir, sizeof dir, "/sys/fs/cgroup/%s%s/cpu.cfs_quota_us", ctrl, rel);
                bool okq = read_line(dir, qs, sizeof qs);
                snprintf(dir, sizeof dir, "/sys/fs/cgroup/%s%s/cpu.cfs_period_us", ctrl, rel);
                if (okq && read_line(dir, ps, sizeof ps)) {
                    q = atoll(qs);
                    p = atoll(ps);
                }
            }
            if (q > 0 && p > 0 && (!found || (double)q / (double)p < *cores)) {
                *cores = (double)q / (double)p;
                *period_s = (double)p * 1e-6;
                found = true;
            }
            if (rel[0] == '\0') /* the root, read last */
                break;
            char *slash = strrchr(rel, '/');
            if (slash == NULL)
                break;
            *slash = '\0';
        }
    }
    fclose(f);
    return found;
}

bool kn_cpu_quota_binding(double *fraction, double *cores, double *period_s)
{
    double c = 0, p = 0;
    int threads = kn_cpu_threads();
    if (!cgroup_quota(&c, &p) || c >= (double)threads)
        return false;
    *fraction = c / (double)threads;
    *cores = c;
    *period_s = p;
    return true;
}

/* cores = ceil(quota / period), or 0 when unlimited / unreadable */
static int cgroup_cores(void)
{
    double c, p;
    if (!cgroup_quota(&c, &p))
        return 0;
    double up = ceil(c - 1e-9);
    return up > KN_CPU_THREADS_MAX ? KN_CPU_THREADS_MAX : up < 1 ? 1 : (int)up;
}

int kn_cpu_cores_available(void)
{
    int n = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        n = CPU_COUNT(&set);
    if (n <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)c : 1;
    }
    int q = cgroup_cores();
    if (q > 0 && q < n)
        n = q;
    return n > KN_CPU_THREADS_MAX ? KN_CPU_THREADS_MAX : n;
}

static atomic_int threads; /* 0 until first set or used */
static atomic_bool fixed;  /* set by kn_cpu_set_threads(n > 0): the count no longer follows */
static atomic_ullong follow_checked_ns; /* kn_cpu_threads_follow_quota's last look */
static atomic_bool forked; /* this process is a fork() child of one that may have computed */
static _Thread_local int serial_depth; /* kn_cpu_blas_serial_begin calls open on this thread */

/* The BLAS loaded at run time runs its products on OpenMP's threads (OpenBLAS's OpenMP variant:
 * openblas_get_parallel() == 2). It takes their count from the calling thread's OpenMP setting. */
static bool blas_on_openmp(void)
{
#ifdef SC_BLAS_OPENMP_POSSIBLE
    static atomic_int parallel = -1;
    int p = atomic_load(&parallel);
    if (p < 0) {
        p = openblas_get_parallel();
        atomic_store(&parallel, p);
    }
    return p == 2;
#else
    return false;
#endif
}

/* OpenMP's threads stay in the process that started them: a forked child that enters a
 * parallel region waits for them forever. So does one that waits for the pool's threads. */
static void after_fork_in_child(void);

__attribute__((constructor)) static void watch_forks(void)
{
    pthread_atfork(NULL, NULL, after_fork_in_child);
}

/* The threads the BLAS may use for a process count of n: one in a forked child whose BLAS
 * runs on OpenMP (its threads stayed in the parent). */
static int blas_count(int n)
{
    return blas_on_openmp() && atomic_load(&forked) ? 1 : n;
}

static void apply(int n)
{
    atomic_store(&threads, n);
#ifdef SC_HAVE_BLAS
    openblas_set_num_threads(blas_count(n));
#endif
}

void kn_cpu_blas_use_threads(void)
{
#ifdef SC_BLAS_OPENMP_POSSIBLE
    if (!blas_on_openmp() || serial_depth > 0 || omp_in_parallel())
        return;
    int n = blas_count(kn_cpu_threads());
    if (omp_get_max_threads() != n)
        omp_set_num_threads(n);
#endif
}

int kn_cpu_blas_threads(void)
{
#ifdef SC_HAVE_BLAS
    return openblas_get_num_threads();
#else
    return 1;
#endif
}

int kn_cpu_blas_serial_begin(void)
{
    int n = kn_cpu_threads();
    serial_depth++;
#ifdef SC_HAVE_BLAS
    if (n > 1)
        openblas_set_num_threads(1);
#endif
    return n;
}

void kn_cpu_blas_serial_end(int n)
{
    serial_depth--;
#ifdef SC_HAVE_BLAS
    if (n > 1)
        openblas_set_num_threads(blas_count(n));
#else
    (void)n;
#endif
}

sc_status kn_cpu_set_threads(int n, const char *what, sc_err *err)
{
    if (n < 0 || n > KN_CPU_THREADS_MAX)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "%s: %d threads asked for; valid: 1 to %d, or 0 for the cores this process "
                       "may use (%d here)",
                       what, n, KN_CPU_THREADS_MAX, kn_cpu_cores_available());
    atomic_store(&fixed, n > 0);
    apply(n == 0 ? kn_cpu_cores_available() : n);
    return SC_OK;
}

int kn_cpu_threads_follow_quota(void)
{
    if (atomic_load(&fixed) || serial_depth > 0)
        return 0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    unsigned long long now = (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
    unsigned long long last = atomic_load(&follow_checked_ns);
    if (last != 0 && now - last < 1000000000ull) /* at most once a second: a few file reads */
        return 0;
    atomic_store(&follow_checked_ns, now);
    int n = kn_cpu_cores_available();
    if (n == kn_cpu_threads())
        return 0;
    apply(n);
    return n;
}

static pthread_once_t default_once = PTHREAD_ONCE_INIT;

static void set_default(void)
{
    if (atomic_load(&threads) == 0)
        apply(kn_cpu_cores_available());
}

int kn_cpu_threads(void)
{
    if (atomic_load(&threads) == 0)
        pthread_once(&default_once, set_default);
    return atomic_load(&threads);
}

/* --- the ranges' threads ----------------------------------------------------------------- */

/* held by the one caller running ranges */
static pthread_mutex_t in_use = PTHREAD_MUTEX_INITIALIZER;

static struct {
    pthread_mutex_t lock; /* guards the fields below */
    pthread_cond_t work, done;
    int started;              /* pool threads running */
    unsigned long generation; /* bumped per call: the threads' signal to look */
    kn_range_fn fn;
    void *arg;
    size_t n, ranges;
    int pending; /* pool threads still on this call */
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER,
          .work = PTHREAD_COND_INITIALIZER,
          .done = PTHREAD_COND_INITIALIZER};

static void after_fork_in_child(void)
{
    /* the parent's threads are not here: start afresh (fork copied the locks as they were) */
    atomic_store(&forked, true);
    pthread_mutex_init(&in_use, NULL);
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.work, NULL);
    pthread_cond_init(&pool.done, NULL);
    pool.started = 0;
    pool.pending = 0;
}

static void run_range(kn_range_fn fn, void *arg, size_t n, size_t ranges, size_t r)
{
    size_t begin = n * r / ranges, end = n * (r + 1) / ranges;
    if (end > begin)
        fn(arg, begin, end);
}

static void *pool_main(void *p)
{
    size_t index = (size_t)(uintptr_t)p; /* runs range index + 1 */
    unsigned long seen = 0;
    pthread_mutex_lock(&pool.lock);
    for (;;) {
        while (pool.generation == seen)
            pthread_cond_wait(&pool.work, &pool.lock);
        seen = pool.generation;
        kn_range_fn fn = pool.fn;
        void *arg = pool.arg;
        size_t n = pool.n, ranges = pool.ranges;
        pthread_mutex_unlock(&pool.lock);
        if (index + 1 < ranges)
            run_range(fn, arg, n, ranges, index + 1);
        pthread_mutex_lock(&pool.lock);
        if (--pool.pending == 0)
            pthread_cond_signal(&pool.done);
    }
    return NULL;
}

/* The ranges on the pool: the caller runs the first. */
static void run_on_pool(size_t n, size_t ranges, kn_range_fn fn, void *arg)
{
    pthread_mutex_lock(&pool.lock);
    while ((size_t)pool.started + 1 < ranges) { /* grow to ranges - 1 threads */
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, pool_main, (void *)(uintptr_t)pool.started);
        pthread_attr_destroy(&attr);
        if (rc != 0)
            break;
        pool.started++;
    }
    if ((size_t)pool.started + 1 < ranges) /* fewer threads than asked for: use those */
        ranges = (size_t)pool.started + 1;
    pool.fn = fn;
    pool.arg = arg;
    pool.n = n;
    pool.ranges = ranges;
    pool.pending = pool.started;
    pool.generation++;
    pthread_cond_broadcast(&pool.work);
    pthread_mutex_unlock(&pool.lock);
    run_range(fn, arg, n, ranges, 0);
    pthread_mutex_lock(&pool.lock);
    while (pool.pending > 0)
        pthread_cond_wait(&pool.done, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
}

void kn_cpu_parallel_for(size_t n, size_t grain, kn_range_fn fn, void *arg)
{
    size_t ranges = (size_t)kn_cpu_threads();
    if (grain < 1)
        grain = 1;
    if (ranges > n / grain)
        ranges = n / grain;
    if (ranges <= 1 || pthread_mutex_trylock(&in_use) != 0) {
        if (n > 0)
            fn(arg, 0, n);
        return;
    }
#ifdef SC_BLAS_OPENMP_POSSIBLE
    if (blas_on_openmp() && !atomic_load(&forked)) {
#pragma omp parallel num_threads((int)ranges)
        run_range(fn, arg, n, (size_t)omp_get_num_threads(), (size_t)omp_get_thread_num());
        pthread_mutex_unlock(&in_use);
        return;
    }
#endif
    run_on_pool(n, ranges, fn, arg);
    pthread_mutex_unlock(&in_use);
}
