/* `stagecraft version`: the version, the wire protocol, the build kind and, in a CUDA build,
 * whether the GPU backend module loads here (and from where). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "kernels/device.h"
#include "kernels/gpu_backend.h"
#include "proto/sc_wire.h"
#include "sc_version.h"

int cmd_version(const cli_command *self, int argc, char **argv)
{
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else
            return cli_usage_error(self, "unknown argument '%s'", argv[i]);
    }
    /* the GPU backend: its file, or why it does not load on this host ("" in a CPU-only build) */
    char backend[SC_ERR_MSG_MAX + 16] = "";
    if (kn_built_with_cuda()) {
        sc_err err;
        sc_err_clear(&err);
        if (kn_gpu_backend_load(&err) == SC_OK)
            snprintf(backend, sizeof backend, "%s", kn_gpu_backend_path());
        else
            snprintf(backend, sizeof backend, "not loaded: %s", err.msg);
    }
    if (json) {
        json_t *o = json_pack("{s:s, s:i, s:s}", "version", SC_VERSION_STRING, "protocol",
                              SC_PROTOCOL_VERSION, "build", SC_BUILD_KIND);
        if (o != NULL && backend[0] != '\0')
            json_object_set_new(o, "gpu_backend", json_string(backend));
        char *text = o != NULL ? json_dumps(o, 0) : NULL;
        printf("%s\n", text != NULL ? text : "{}");
        free(text);
        json_decref(o);
    } else {
        printf("stagecraft %s\nprotocol %d\nbuild %s\n", SC_VERSION_STRING, SC_PROTOCOL_VERSION,
               SC_BUILD_KIND);
        if (backend[0] != '\0')
            printf("gpu backend %s\n", backend);
    }
    return CLI_OK;
}
