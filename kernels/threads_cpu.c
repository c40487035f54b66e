/*
 * kn threads: the process's CPU thread count and its default from the affinity mask and the
 * cgroup CPU quota (threads_cpu.h). Applies the count to OpenBLAS when the build has it.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "kernels/threads_cpu.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef SC_HAVE_BLAS
#include <cblas.h>
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

/* cores = ceil(quota / period), or 0 when unlimited / unreadable */
static int quota_cores(long long quota, long long period)
{
    if (quota <= 0 || period <= 0)
        return 0;
    long long c = (quota + period - 1) / period;
    return c > KN_CPU_THREADS_MAX ? KN_CPU_THREADS_MAX : (int)c;
}

/* The smallest quota on the cgroup path of this process and its ancestors (v2: cpu.max; v1:
 * the cpu controller's cfs files); 0 when there is none. */
static int cgroup_cores(void)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (f == NULL)
        return 0;
    char line[4096], dir[4096 + 64];
    int best = 0;
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
            int cores = 0;
            if (v2) {
                snprintf(dir, sizeof dir, "/sys/fs/cgroup%s/cpu.max", rel);
                long long q = 0, p = 0;
                if (read_line(dir, buf, sizeof buf) && sscanf(buf, "%lld %lld", &q, &p) == 2)
                    cores = quota_cores(q, p);
            } else {
                char q[128], p[128];
                snprintf(dir, sizeof dir, "/sys/fs/cgroup/%s%s/cpu.cfs_quota_us", ctrl, rel);
                bool okq = read_line(dir, q, sizeof q);
                snprintf(dir, sizeof dir, "/sys/fs/cgroup/%s%s/cpu.cfs_period_us", ctrl, rel);
                if (okq && read_line(dir, p, sizeof p))
                    cores = quota_cores(atoll(q), atoll(p));
            }
            if (cores > 0 && (best == 0 || cores < best))
                best = cores;
            if (rel[0] == '\0') /* the root, read last */
                break;
            char *slash = strrchr(rel, '/');
            if (slash == NULL)
                break;
            *slash = '\0';
        }
    }
    fclose(f);
    return best;
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

static void apply(int n)
{
    atomic_store(&threads, n);
#ifdef SC_HAVE_BLAS
    openblas_set_num_threads(n);
#endif
}

sc_status kn_cpu_set_threads(int n, const char *what, sc_err *err)
{
    if (n < 0 || n > KN_CPU_THREADS_MAX)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "%s: %d threads asked for; valid: 1 to %d, or 0 for the cores this process "
                       "may use (%d here)",
                       what, n, KN_CPU_THREADS_MAX, kn_cpu_cores_available());
    apply(n == 0 ? kn_cpu_cores_available() : n);
    return SC_OK;
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
