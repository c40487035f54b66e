/* `stagecraft coordinator`: runs the coordinator daemon until SIGINT or SIGTERM. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli/client.h"
#include "cli/commands.h"
#include "common/sc_util.h"
#include "coordinator/coordinator.h"

int cmd_coordinator(const cli_command *self, int argc, char **argv)
{
    enum {
        O_LISTEN = 1,
        O_STATE,
        O_ADVERTISE,
        O_JOIN,
        O_CLIENT,
        O_HB,
        O_SUSPECT,
        O_DEAD,
        O_CERT,
        O_KEY,
        O_CA,
        O_PROFILE_TIMEOUT,
        O_REPROFILE,
        O_HTTP
    };
    static const struct option opts[] = {
        {"listen", required_argument, NULL, O_LISTEN},
        {"state", required_argument, NULL, O_STATE},
        {"advertise", required_argument, NULL, O_ADVERTISE},
        {"join-token-file", required_argument, NULL, O_JOIN},
        {"token-file", required_argument, NULL, O_CLIENT},
        {"heartbeat-ms", required_argument, NULL, O_HB},
        {"suspect-after", required_argument, NULL, O_SUSPECT},
        {"dead-after", required_argument, NULL, O_DEAD},
        {"tls-cert", required_argument, NULL, O_CERT},
        {"tls-key", required_argument, NULL, O_KEY},
        {"tls-ca", required_argument, NULL, O_CA},
        {"profile-timeout-ms", required_argument, NULL, O_PROFILE_TIMEOUT},
        {"reprofile-ms", required_argument, NULL, O_REPROFILE},
        {"http", required_argument, NULL, O_HTTP},
        {NULL, 0, NULL, 0},
    };
    coord_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.listen_addr = "127.0.0.1:7070";
    /* the dashboard is on by default where only this machine can see it */
    cfg.http_addr = "127.0.0.1:8080";
    cfg.http_optional = true; /* until --http names one */
    const char *join_file = NULL, *client_file = NULL;
    sc_err err;
    sc_err_clear(&err);
    int64_t v;
    int c;
    while ((c = cli_getopt(self, argc, argv, opts)) != -1) {
        switch (c) {
        case -2:
            return CLI_USAGE;
        case O_LISTEN:
            cfg.listen_addr = optarg;
            break;
        case O_STATE:
            cfg.state_dir = optarg;
            break;
        case O_ADVERTISE:
            cfg.advertise_host = optarg;
            break;
        case O_JOIN:
            join_file = optarg;
            break;
        case O_CLIENT:
            client_file = optarg;
            break;
        case O_HB:
            if (sc_parse_int64(optarg, 10, 600000, "--heartbeat-ms", &v, &err) != SC_OK)
                return cli_report(self, &err);
            cfg.registry.heartbeat_interval_ms = (uint32_t)v;
            break;
        case O_SUSPECT:
            if (sc_parse_int64(optarg, 1, 1000, "--suspect-after", &v, &err) != SC_OK)
                return cli_report(self, &err);
            cfg.registry.suspect_after = (uint32_t)v;
            break;
        case O_DEAD:
            if (sc_parse_int64(optarg, 2, 1000, "--dead-after", &v, &err) != SC_OK)
                return cli_report(self, &err);
            cfg.registry.dead_after = (uint32_t)v;
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
        case O_PROFILE_TIMEOUT:
            if (sc_parse_int64(optarg, 100, 3600000, "--profile-timeout-ms", &v, &err) != SC_OK)
                return cli_report(self, &err);
            cfg.profile_timeout_ms = (uint32_t)v;
            break;
        case O_HTTP:
            cfg.http_addr = strcmp(optarg, "off") == 0 ? NULL : optarg;
            cfg.http_optional = false;
            break;
        case O_REPROFILE:
            if (sc_parse_int64(optarg, 100, 86400000, "--reprofile-ms", &v, &err) != SC_OK)
                return cli_report(self, &err);
            cfg.reprofile_ms = (uint32_t)v;
            break;
        }
    }
    if (optind < argc)
        return cli_usage_error(self, "unexpected argument '%s'", argv[optind]);
    if (cfg.state_dir == NULL)
        return cli_usage_error(self, "--state DIR is required (jobs and tokens are kept there)");
    if (sc_parse_hostport(cfg.listen_addr, true, "--listen", NULL, 0, NULL, &err) != SC_OK)
        return cli_report(self, &err);
    if (cfg.http_addr != NULL &&
        sc_parse_hostport(cfg.http_addr, true, "--http (or 'off')", NULL, 0, NULL, &err) != SC_OK)
        return cli_report(self, &err);
    if ((cfg.tls.cert_path == NULL) != (cfg.tls.key_path == NULL))
        return cli_usage_error(self, "--tls-cert and --tls-key go together");
    char join[256], client[256];
    if (cli_read_token(join_file, "STAGECRAFT_JOIN_TOKEN", join, sizeof join, &err) != SC_OK ||
        cli_read_token(client_file, "STAGECRAFT_TOKEN", client, sizeof client, &err) != SC_OK)
        return cli_report(self, &err);
    cfg.join_token = join[0] ? join : NULL;
    cfg.client_token = client[0] ? client : NULL;

    /* Each worker holds one control connection (a file descriptor): take every descriptor the
     * hard limit allows, and say how many workers that leaves room for. */
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
        nofile.rlim_cur = nofile.rlim_max;
        setrlimit(RLIMIT_NOFILE, &nofile);
    }
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY &&
        nofile.rlim_cur < 4096)
        fprintf(stderr,
                "stagecraft coordinator: the open-files limit is %llu, enough for about %llu "
                "workers; raise it (ulimit -n, systemd LimitNOFILE) for more\n",
                (unsigned long long)nofile.rlim_cur,
                (unsigned long long)(nofile.rlim_cur > 64 ? nofile.rlim_cur - 64 : 0));

    static volatile sig_atomic_t stop;
    cli_on_stop_signals(&stop);
    coord *co = NULL;
    if (coord_new(&co, &cfg, &err) != SC_OK) {
        int code = cli_report(self, &err);
        /* a state folder another coordinator holds: the user's setup, like a bad flag */
        return err.code == SC_ERR_PRECONDITION ? CLI_USAGE : code;
    }
    printf("coordinator listening on port %d, control %s\n", coord_port(co),
           coord_control_endpoint(co));
    if (coord_http_bound_port(co) >= 0)
        printf("dashboard and metrics on http port %d (--http %s)\n", coord_http_bound_port(co),
               cfg.http_addr);
    if (coord_join_token_path(co)[0])
        printf("join token for workers: %s\n", coord_join_token_path(co));
    if (coord_client_token_path(co)[0])
        printf("client token for submit/cancel: %s\n", coord_client_token_path(co));
    fflush(stdout);
    sc_status rc = coord_run(co, &stop, &err);
    coord_destroy(&co);
    return rc == SC_OK ? CLI_OK : cli_report(self, &err);
}
