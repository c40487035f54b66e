/* `stagecraft version`: the version, the wire protocol and the build kind. Needs no other module. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
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
    if (json)
        printf("{\"version\": \"%s\", \"protocol\": %d, \"build\": \"%s\"}\n", SC_VERSION_STRING,
               SC_PROTOCOL_VERSION, SC_BUILD_KIND);
    else
        printf("stagecraft %s\nprotocol %d\nbuild %s\n", SC_VERSION_STRING, SC_PROTOCOL_VERSION,
               SC_BUILD_KIND);
    return CLI_OK;
}
