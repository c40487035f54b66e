/* `stagecraft worker`: runs a worker agent until SIGINT or SIGTERM; with --numa-node, bound to
 * one NUMA node first (topology/topo_bind.h). Once the agent has said it leaves (and, in an
 * elastic job, handed its blocks over), the process exits within EXIT_GRACE_MS whatever its
 * threads still do: a profile or a step that cannot be interrupted is not waited for. */
#include <getopt.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/client.h"
#include "cli/commands.h"
#include "common/sc_log.h"
#include "common/sc_util.h"
#include "kernels/threads_cpu.h"
#include "topology/topo_bind.h"
#include "worker/agent.h"
#include "worker/service.h"

#define EXIT_GRACE_MS 5000

/* The exit watchdog: the agent's teardown waits for its threads (a Profile call in flight, a
 * stage's step); past EXIT_GRACE_MS the process exits without them. */
static void *exit_watchdog(void *arg)
{
    int status = (int)(intptr_t)arg; /* the agent's outcome: what the exit says */
    usleep(EXIT_GRACE_MS * 1000);
    SC_LOG_WARN("worker",
                "stopping takes over %d s (a profile or a step that cannot be interrupted); "
                "exiting without waiting for it",
                EXIT_GRACE_MS / 1000);
    _exit(status);
    return NULL;
}

int cmd_worker(const cli_command *self, int argc, char **argv)
{
    enum {
        O_COORD = 1,
        O_DEVICE,
        O_NAME,
        O_LISTEN,
        O_ADVERTISE,
        O_STATE,
        O_JOIN,
        O_CERT,
        O_KEY,
        O_CA,
        O_THREADS,
        O_NUMA
    };
    static const struct option opts[] = {
        {"coordinator", required_argument, NULL, O_COORD},
        {"device", required_argument, NULL, O_DEVICE},
        {"name", required_argument, NULL, O_NAME},
        {"listen", required_argument, NULL, O_LISTEN},
        {"advertise", required_argument, NULL, O_ADVERTISE},
        {"state", required_argument, NULL, O_STATE},
        {"join-token-file", required_argument, NULL, O_JOIN},
        {"tls-cert", required_argument, NULL, O_CERT},
        {"tls-key", required_argument, NULL, O_KEY},
        {"tls-ca", required_argument, NULL, O_CA},
        {"threads", required_argument, NULL, O_THREADS},
        {"numa-node", required_argument, NULL, O_NUMA},
        {NULL, 0, NULL, 0},
    };
    wk_agent_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    const char *coord_flag = NULL, *join_file = NULL, *threads = NULL, *numa = NULL;
    int c;
    while ((c = cli_getopt(self, argc, argv, opts)) != -1) {
        switch (c) {
        case -2:
            return CLI_USAGE;
        case O_COORD:
            coord_flag = optarg;
            break;
        case O_DEVICE:
            cfg.device = optarg;
            break;
        case O_NAME:
            cfg.name = optarg;
            break;
        case O_LISTEN:
            cfg.listen_addr = optarg;
            break;
        case O_ADVERTISE:
            cfg.advertise_host = optarg;
            break;
        case O_STATE:
            cfg.state_dir = optarg;
            break;
        case O_JOIN:
            join_file = optarg;
            break;
        case O_CERT:
            cfg.tls.cert_path = optarg;
            break;
        case O_KEY:
            cfg.tls.key_path = optarg;
            break;
        case O_CA:
            cfg.tls.ca_path = optarg;
            break;
        case O_THREADS:
            threads = optarg;
            break;
        case O_NUMA:
            numa = optarg;
            break;
        }
    }
    if (optind < argc)
        return cli_usage_error(self, "unexpected argument '%s'", argv[optind]);
    sc_err err;
    sc_err_clear(&err);
    /* Bound before anything reads the affinity mask (the --threads default) or starts a thread;
     * the threads OpenBLAS started at load time move with the process. */
    char numa_name[256];
    topo_bind_result bound = {0};
    if (numa != NULL) {
        int64_t node = 0;
        if (sc_parse_int64(numa, 0, INT32_MAX, "--numa-node", &node, &err) != SC_OK)
            return cli_usage_error(self, "%s", err.msg);
        if (topo_bind_numa_node((int)node, "--numa-node", &bound, &err) != SC_OK)
            return err.code == SC_ERR_INVALID ? cli_usage_error(self, "%s", err.msg)
                                              : cli_report(self, &err);
        if (!bound.memory_bound)
            SC_LOG_WARN("worker",
                        "--numa-node %d: memory binding refused (%s); the CPUs stay bound, so "
                        "first touch keeps the worker's memory on the node",
                        bound.os_index, bound.memory_note);
        if (cfg.name == NULL) { /* two such workers on one host need two names */
            char host[200] = "worker";
            gethostname(host, sizeof host - 1);
            host[sizeof host - 1] = '\0';
            snprintf(numa_name, sizeof numa_name, "%s-%s-numa%d", host,
                     cfg.device ? cfg.device : "cpu", bound.os_index);
            for (char *p = numa_name; *p; p++)
                if (*p == ':')
                    *p = '-';
            cfg.name = numa_name;
        }
    }
    /* the CPU kernels' threads, for the stages and the profiles this worker runs */
    int64_t nthreads = 0;
    if (threads != NULL &&
        (sc_parse_int64(threads, 1, KN_CPU_THREADS_MAX, "--threads", &nthreads, &err) != SC_OK ||
         kn_cpu_set_threads((int)nthreads, "--threads", &err) != SC_OK))
        return cli_usage_error(self, "%s", err.msg);
    if (numa != NULL) /* the thread count read after the binding: its default follows it */
        SC_LOG_INFO("worker",
                    "--numa-node %d: bound to CPUs %s (%d core%s, %d hardware thread%s)%s; the "
                    "CPU kernels use %d thread%s",
                    bound.os_index, bound.cpus, bound.n_cores, bound.n_cores == 1 ? "" : "s",
                    bound.n_pus, bound.n_pus == 1 ? "" : "s",
                    bound.memory_bound ? " and memory to the node" : "", kn_cpu_threads(),
                    kn_cpu_threads() == 1 ? "" : "s");
    if (cli_coordinator_addr(coord_flag, &cfg.coordinator, &err) != SC_OK ||
        (cfg.listen_addr != NULL &&
         sc_parse_hostport(cfg.listen_addr, true, "--listen", NULL, 0, NULL, &err) != SC_OK))
        return cli_report(self, &err);
    char join[256];
    if (cli_read_token(join_file, "STAGECRAFT_JOIN_TOKEN", join, sizeof join, &err) != SC_OK)
        return cli_report(self, &err);
    cfg.join_token = join;

    /* its recent lines, for `stagecraft logs` through the coordinator (Worker.ReadLog) */
    if (sc_log_keep_lines(WK_LOG_LINES, &err) != SC_OK)
        return cli_report(self, &err);
    static volatile sig_atomic_t stop;
    cli_on_stop_signals(&stop);
    wk_agent *a = NULL;
    if (wk_agent_new(&a, &cfg, &err) != SC_OK) {
        int status = cli_report(self, &err);
        /* another worker process holds this --name in this --state: a usage mistake */
        return err.code == SC_ERR_EXISTS ? CLI_USAGE : status;
    }
    sc_status rc = wk_agent_run(a, &stop, &err);
    pthread_t watchdog;
    if (pthread_create(&watchdog, NULL, exit_watchdog, (void *)(intptr_t)(rc == SC_OK ? 0 : 1)) ==
        0)
        pthread_detach(watchdog);
    wk_agent_destroy(&a);
    return rc == SC_OK ? CLI_OK : cli_report(self, &err);
}
