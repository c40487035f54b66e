/*
 * The subcommands: their table and lookup by name (commands.c), and the entry point and usage
 * text of each, one pair per cmd_<name>.c (`help` lives beside the table it lists).
 */
#ifndef SC_CLI_COMMANDS_H
#define SC_CLI_COMMANDS_H

#include "cli/cli.h"

/* The subcommand table, terminated by an entry with name == NULL. */
extern const cli_command cli_commands[];

/* The subcommand called `name`, or NULL. */
const cli_command *cli_find(const char *name);

#define CMD_VERSION_USAGE                                                                          \
    "usage: stagecraft version [--json]\n\n"                                                       \
    "Prints the stagecraft version, the wire protocol version, whether this build has CUDA and,\n" \
    "if it has, where the GPU backend module loads from or why it does not load on this host.\n"   \
    "  --json   print {\"version\": ..., \"protocol\": ..., \"build\": ..., \"gpu_backend\": "     \
    "...}\n"
int cmd_version(const cli_command *self, int argc, char **argv);

#define CMD_HELP_USAGE                                                                             \
    "usage: stagecraft help [SUBCOMMAND]\n\n"                                                      \
    "Shows the list of subcommands, or the help of one.\n"
int cmd_help(const cli_command *self, int argc, char **argv);

#define CMD_TOPO_USAGE                                                                             \
    "usage: stagecraft topo [--xml FILE ...] [--json] [--no-measure] [--no-cuda]\n"                 \
    "                       [--export-xml FILE] [--cpu-workers]\n\n"                               \
    "Shows the hardware stagecraft plans with: per server, the GPUs (memory, NUMA node, PCIe\n"    \
    "root port), the CPU when no GPU is usable, the NICs, and the links between devices\n"         \
    "(NVLink, PCIe uplinks, socket interconnect, NICs) with their bandwidths and which devices\n"  \
    "share them, and the NUMA nodes with the CPU workers to run (one per NUMA node:\n"          \
    "`stagecraft worker --numa-node N`). Without --xml: this machine (hwloc + the CUDA driver\n"  \
    "when present).\n"                                                                             \
    "  --xml FILE ...     hwloc XML exports (`lstopo --of xml`), one server each; files from\n"   \
    "                     the same host name merge into one server\n"                            \
    "  --json             print the cluster JSON (format stagecraft-cluster) for\n"               \
    "                     `stagecraft plan --cluster`\n"                                          \
    "  --no-measure       skip the short probes (memory bandwidth, GEMM, copies) on this machine\n"\
    "  --no-cuda          do not load the CUDA driver\n"                                          \
    "  --export-xml FILE  also write the (single) server's topology as hwloc XML\n"              \
    "  --cpu-workers      print only the NUMA nodes to run one CPU worker on each (os index,\n"  \
    "                     one a line): `stagecraft worker --numa-node N` for each\n"
int cmd_topo(const cli_command *self, int argc, char **argv);

#define CMD_COORDINATOR_USAGE                                                                      \
    "usage: stagecraft coordinator --state DIR [--listen HOST:PORT] [--advertise HOST]\n"          \
    "                              [--join-token-file FILE] [--token-file FILE]\n"                 \
    "                              [--heartbeat-ms MS] [--suspect-after N] [--dead-after N]\n"     \
    "                              [--profile-timeout-ms MS] [--reprofile-ms MS]\n"               \
    "                              [--http HOST:PORT|off]\n"                                      \
    "                              [--tls-cert PEM --tls-key PEM [--tls-ca PEM]]\n\n"              \
    "Runs the coordinator: registers workers, takes jobs, profiles, plans and assigns stages.\n"   \
    "  --state DIR            jobs (SQLite) and generated tokens live here; a restarted\n"         \
    "                         coordinator resumes from it\n"                                       \
    "  --listen HOST:PORT     gRPC address (default 127.0.0.1:7070); the ZeroMQ control\n"         \
    "                         endpoint binds the same host on a free port\n"                       \
    "  --advertise HOST       host name workers use to reach the control endpoint\n"               \
    "  --join-token-file F    workers' join token (else STAGECRAFT_JOIN_TOKEN, else generated\n"   \
    "                         into DIR/join.token)\n"                                              \
    "  --token-file F         client token for submit/cancel (else STAGECRAFT_TOKEN, else\n"       \
    "                         generated into DIR/client.token)\n"                                  \
    "  --heartbeat-ms MS      heartbeat interval workers are told to use (default 1000)\n"         \
    "  --suspect-after N      missed heartbeats before a worker is suspect (default 3)\n"          \
    "  --dead-after N         missed heartbeats before it is dead (default 5)\n"                   \
    "  --profile-timeout-ms MS  deadline of one worker's profiling (default 60000)\n"              \
    "  --reprofile-ms MS      how often a running job profiles free workers it could use\n"        \
    "                         (left out by a re-plan, or joining an elastic job; 10000)\n"         \
    "  --http HOST:PORT|off   dashboard, /metrics and /api, read-only (default 127.0.0.1:8080;\n"   \
    "                         port 0 picks one); beyond loopback they need the client token\n"    \
    "                         as 'Authorization: Bearer TOKEN'\n"                                 \
    "  --tls-cert/--tls-key/--tls-ca  serve gRPC over TLS (mutual when --tls-ca is given)\n"
int cmd_coordinator(const cli_command *self, int argc, char **argv);

#define CMD_WORKER_USAGE                                                                           \
    "usage: stagecraft worker [--coordinator HOST:PORT] [--device cpu|cuda:N] [--name NAME]\n"    \
    "                         [--listen HOST:PORT] [--advertise HOST] [--state DIR]\n"          \
    "                         [--join-token-file FILE] [--tls-cert PEM --tls-key PEM --tls-ca PEM]\n"\
    "                         [--threads N] [--numa-node N]\n\n"                                 \
    "Runs a worker agent for one device: registers with the coordinator, heartbeats, profiles\n" \
    "and runs the stages it is assigned. Re-registers when the coordinator comes back.\n"        \
    "  --coordinator HOST:PORT  default STAGECRAFT_COORDINATOR, else 127.0.0.1:7070\n"            \
    "  --device cpu|cuda:N      the device this worker drives (default cpu)\n"                    \
    "  --name NAME              worker name (default HOSTNAME-DEVICE)\n"                          \
    "  --listen HOST:PORT       this worker's gRPC service (default 127.0.0.1:0)\n"              \
    "  --advertise HOST         host the coordinator dials this worker at\n"                      \
    "  --state DIR              keeps the worker id across restarts (default .)\n"               \
    "  --join-token-file FILE   the coordinator's join token (else STAGECRAFT_JOIN_TOKEN)\n"     \
    "  --tls-cert/--tls-key/--tls-ca  TLS for gRPC, as on the coordinator\n"                    \
    "  --threads N              CPU threads of the kernels (default: the cores of the\n"        \
    "                           affinity mask, capped by the cgroup CPU quota)\n"              \
    "  --numa-node N            bind the worker's threads and memory to NUMA node N (hwloc os\n" \
    "                           index; `stagecraft topo` shows the layout); --threads then\n"  \
    "                           defaults to that node's CPUs\n"
int cmd_worker(const cli_command *self, int argc, char **argv);

#define CMD_SUBMIT_USAGE                                                                           \
    "usage: stagecraft submit JOB.json [--follow] [--coordinator HOST:PORT] [--token-file FILE]\n"\
    "                        [--json]\n\n"                                                         \
    "Validates a job spec (format stagecraft-job) and submits it. Prints the job id\n"            \
    "({\"job_id\": ...} with --json). The client token comes from --token-file or\n"              \
    "STAGECRAFT_TOKEN.\n"                                                                          \
    "  --follow   then follow the job as status JOB --follow does; the exit status is 0 only\n"  \
    "             when the job succeeded\n"
int cmd_submit(const cli_command *self, int argc, char **argv);

#define CMD_STATUS_USAGE                                                                           \
    "usage: stagecraft status [JOB [--follow | --history]] [--coordinator HOST:PORT] [--json]\n\n" \
    "Without JOB: every job with its state. With JOB: its state and why, progress and plan.\n"     \
    "--json prints the job(s) with job_id, state, step and plan.\n"                                \
    "  --history  JOB's training series instead: step, loss, samples/s and iteration time per\n"   \
    "             step, oldest first, as the coordinator keeps them (at most 1000 points,\n"       \
    "             older steps thinned); with --json, the job object gains \"history\"\n"           \
    "  --follow   print JOB's state changes as they happen and a live progress line (step\n"       \
    "             bar, loss, samples/s, ETA) until it ends; exit status 0 only when it\n"          \
    "             succeeded, 1 when it failed or was cancelled (--json: one JSON object\n"         \
    "             a line per change or progress update)\n"
int cmd_status(const cli_command *self, int argc, char **argv);

#define CMD_CANCEL_USAGE                                                                           \
    "usage: stagecraft cancel JOB [--reason TEXT] [--coordinator HOST:PORT] [--token-file FILE]\n"\
    "                        [--json]\n\n"                                                         \
    "Cancels a job and releases its workers; a job already cancelled is said to be so (exit\n"  \
    "0). The client token comes from --token-file or STAGECRAFT_TOKEN.\n"                        \
    "  --reason TEXT  recorded in the job's history\n"
int cmd_cancel(const cli_command *self, int argc, char **argv);

#define CMD_TRACE_USAGE                                                                            \
    "usage: stagecraft trace JOB --out FILE [--iterations N] [--coordinator HOST:PORT] "           \
    "[--json]\n\n"                                                                                 \
    "Writes a Chrome / Perfetto trace of a running job's last iterations as they ran (per stage\n" \
    "copy: forward, backward, send, receive, all-reduce, optimizer; each worker's clock aligned\n" \
    "to the coordinator's) with the plan's simulated iteration beside it, starting where the\n"    \
    "first measured iteration starts, and prints a one-line summary.\n"                            \
    "  --out FILE           the trace file (open it in ui.perfetto.dev or chrome://tracing)\n"     \
    "  --iterations N       the newest N iterations (default: all the workers keep, 8)\n"          \
    "  --coordinator H:P    the coordinator (else STAGECRAFT_COORDINATOR, else 127.0.0.1:7070)\n"  \
    "  --json               print the summary as one JSON object\n"
int cmd_trace(const cli_command *self, int argc, char **argv);

#define CMD_LOGS_USAGE                                                                             \
    "usage: stagecraft logs WORKER|JOB [--lines N] [--follow] [--coordinator HOST:PORT] "          \
    "[--json]\n\n"                                                                                 \
    "Prints the recent log lines of a worker (its id or name), or of every worker of a job,\n"     \
    "fetched through the coordinator: each worker's newest N lines, all in time order, the\n"      \
    "newest last, each prefixed with its worker's id. A worker that does not answer within 2 s\n"  \
    "is named on stderr and the others are printed (exit 1 only when none answered).\n"            \
    "  --lines N            the newest N lines of each worker (default 50; a worker keeps 1000)\n" \
    "  --follow             then print new lines as they come, until interrupted\n"                \
    "  --coordinator H:P    the coordinator (else STAGECRAFT_COORDINATOR, else 127.0.0.1:7070)\n"  \
    "  --json               one document {\"workers\": [{worker_id, name, lines, error}]};\n"      \
    "                       with --follow, one object {worker_id, seq, text} a line\n"
int cmd_logs(const cli_command *self, int argc, char **argv);
#define CMD_REBALANCE_USAGE                                                                        \
    "usage: stagecraft rebalance JOB [--dry-run] [--json] [--coordinator HOST:PORT]\n"             \
    "                            [--token-file FILE]\n\n"                                          \
    "Re-plans a running job now with the speeds measured while it runs, and moves the blocks\n"    \
    "that change owner from worker to worker at the next iteration boundary. The job also does\n"  \
    "this by itself when a worker's speed changes enough (job option \"rebalance\": "              \
    "\"auto\").\n\n"                                                                               \
    "  --dry-run            only show the plan it would use and the predicted gain\n"              \
    "  --json               the figures and the plan as JSON\n"                                    \
    "  --token-file F       client token (else STAGECRAFT_TOKEN); --dry-run needs none\n"
int cmd_rebalance(const cli_command *self, int argc, char **argv);

#define CMD_WORKERS_USAGE                                                                          \
    "usage: stagecraft workers [--coordinator HOST:PORT] [--json]\n\n"                             \
    "Lists the registered workers: id, name, host, state (alive, suspect, dead), device, last\n"  \
    "heartbeat and job.\n"
int cmd_workers(const cli_command *self, int argc, char **argv);

#define CMD_PROFILE_USAGE                                                                          \
    "usage: stagecraft profile --model SPEC [--device cpu|cuda:N] [--microbatch 1,2,4]\n"          \
    "                          [--warmup N] [--repeats N] [--microbatch-size N]\n"                \
    "                          [--precision fp32|tf32|bf16|fp16|auto] [--tf32]\n"                 \
    "                          [--sustained-ms MS] [--out FILE] [--json]\n\n"                      \
    "Measures each block of the model in SPEC (a stagecraft-model JSON file) on one device:\n"     \
    "forward and backward time per micro-batch size (median of the repeats after the warm-up;\n"   \
    "CUDA events on a GPU), output activation, parameter and stash bytes. Writes the\n"            \
    "stagecraft-profile JSON that the planner reads (stagecraft plan).\n"                          \
    "  --device DEV          cpu (default) or cuda:N\n"                                            \
    "  --microbatch LIST     micro-batch sizes to measure (default 1)\n"                           \
    "  --warmup N            untimed iterations per size (default 2)\n"                            \
    "  --repeats N           timed iterations per size (default 5)\n"                              \
    "  --microbatch-size N   size of the top-level times (default: the largest measured)\n"        \
    "  --sustained-ms MS     time passes for at least MS per size and take the long-run speed\n"   \
    "                        (what a worker does: a CPU quota or power cap throttles only\n"       \
    "                        after a burst); default 0: medians of the repeats\n"                  \
    "  --precision P         what the blocks compute in (default fp32): tf32 (GPU matmuls on\n"    \
    "                        TF32 tensor cores), bf16 or fp16 (products on 16-bit inputs, fp32\n" \
    "                        accumulation; emulated on a CPU), auto (bf16 where the GPU has it,\n"\
    "                        else fp16; fp32 on a CPU)\n"                                         \
    "  --tf32                the same as --precision tf32\n"                                       \
    "  --out FILE            write the JSON to FILE instead of stdout\n"
int cmd_profile(const cli_command *self, int argc, char **argv);

#define CMD_EVAL_USAGE                                                                             \
    "usage: stagecraft eval --model SPEC|DIR --data PATH [--seq-len T] [--batch B]\n"              \
    "                       [--batches N] [--device cpu|cuda:N] [--json]\n\n"                      \
    "Mean next-token cross-entropy of a language model over llm.c token shards (the `tokens`\n"    \
    "data format; PATH may be a glob), read in order as llm.c reads them: batch b takes tokens\n"  \
    "[b*B*T, b*B*T + B*T + 1) of the concatenated shards, the first B*T the inputs (B rows of\n"   \
    "T), the same span shifted by one the targets.\n"                                              \
    "  --model SPEC|DIR  a model spec file, or a Hugging Face checkpoint folder\n"                 \
    "  --seq-len T       context per row (default: the model's; a folder's can be shortened)\n"    \
    "  --batch B         rows per batch (default 4)\n"                                             \
    "  --batches N       batches (default: every full batch in the data)\n"                        \
    "  --device DEV      cpu (default) or cuda:N\n"                                                \
    "  --json            print {\"loss\": L, \"tokens\": N*B*T}\n"
int cmd_eval(const cli_command *self, int argc, char **argv);

#define CMD_EXPORT_USAGE                                                                           \
    "usage: stagecraft export JOB --out DIR [--step N] [--coordinator HOST:PORT]\n"                \
    "                         [--token-file FILE] [--timeout-ms MS] [--json]\n"                    \
    "       stagecraft export --model SPEC --checkpoints DIR --out DIR [--step N] [--json]\n\n"    \
    "Writes the model trained by a job as a Hugging Face checkpoint folder: config.json and\n"     \
    "model.safetensors (float32), names and layout as transformers' from_pretrained expects.\n"    \
    "Models of kind \"hf\" (GPT-2, Llama) and \"gpt\" (written as GPT-2) are exported.\n"          \
    "With JOB: the coordinator names the job's last complete checkpoint and the workers that\n"    \
    "hold each stage of it; the blocks are fetched from their block servers to this machine.\n"    \
    "A job read from a Hugging Face folder needs that folder's config.json here too.\n"            \
    "With --model and --checkpoints: SPEC is the job's model, DIR holds its stage checkpoints\n"   \
    "(stageS-stepN.ckpt: the workers' checkpoint folders of the job, gathered in one).\n"          \
    "  --step N           the checkpoint step (default: the last complete one)\n"                  \
    "  --coordinator H:P  the coordinator (else STAGECRAFT_COORDINATOR, else 127.0.0.1:7070)\n"    \
    "  --token-file F     client token (else STAGECRAFT_TOKEN)\n"                                  \
    "  --timeout-ms MS    a worker silent this long is skipped for the next (default 10000)\n"     \
    "  --json             print {\"out\", \"step\", \"model\"} (and \"job\")\n"
int cmd_export(const cli_command *self, int argc, char **argv);

#define CMD_PLAN_USAGE                                                                             \
    "usage: stagecraft plan --model FILE (--cluster FILE | --gpus N --bandwidth B [--memory M])\n" \
    "                       [--batch B] [--microbatches M|auto] [--stages N]\n"                   \
    "                       [--schedule gpipe|1f1b|pipedream|sliced|zb1|auto]\n"                 \
    "                       [--strategy NAME|all] [--zb1-memory device|1f1b_peak]\n"         \
    "                       [--json] [--trace FILE]\n\n"                                         \
    "Plans pipeline parallelism offline: cuts the model's blocks into stages, places them on\n"  \
    "devices, picks the micro-batches, simulates the schedule and compares strategies.\n"       \
    "  --model FILE        stagecraft-profile JSON, or a PipeDream graph.txt\n"                  \
    "  --cluster FILE      stagecraft-cluster JSON (`stagecraft topo --json` writes one)\n"      \
    "  --gpus N --bandwidth B [--memory M]  N identical devices joined by B bytes/s, each\n"     \
    "                      with M bytes of memory (default: unlimited)\n"                       \
    "  --batch B           global batch in samples (default 2 x devices x the profile's\n"      \
    "                      micro-batch; 8 x devices for graph.txt)\n"                           \
    "  --microbatches M    micro-batches per iteration, or auto (default): closed form plus a\n"\
    "                      simulated sweep, capped by memory\n"                                 \
    "  --stages N          at most N stages (uniform, blockpartition, minmax, autopipe,\n"      \
    "                      exhaustive)\n"                                                        \
    "  --schedule S        gpipe, 1f1b (default), pipedream (asynchronous), sliced, zb1\n"      \
    "                      (zero-bubble ZB-H1: each backward split into B and a deferred W),\n"  \
    "                      or auto (the fastest of gpipe, 1f1b, sliced and zb1 that fits)\n"    \
    "  --strategy NAME     uniform, blockpartition, minmax, pipedream, autopipe, hetero,\n"     \
    "                      umpipe, exhaustive, or all (default)\n"                               \
    "  --zb1-memory R      what bounds zb1's deferred weight gradients: device (default,\n"     \
    "                      each device's memory) or 1f1b_peak (also 1f1b's fullest stage)\n"   \
    "  --json              print {\"plans\": [...]} (docs/reference/formats.md)\n"                 \
    "  --trace FILE        write the fastest plan's simulated schedule as a Chrome trace\n"     \
    "Exit status: 0 ok, 1 runtime failure, 2 bad usage or input.\n"
int cmd_plan(const cli_command *self, int argc, char **argv);

#define CMD_ADVISE_USAGE                                                                           \
    "usage: stagecraft advise --model FILE --catalog FILE\n"                                       \
    "       stagecraft advise --workers --model JOB_FILE [--catalog FILE] [--coordinator H:P]\n"  \
    "       stagecraft advise --job JOB [--catalog FILE] [--coordinator H:P]\n"                    \
    "                         [--objective throughput|cost|min-cost-at=S|max-throughput-at=C|\n"   \
    "                                      deadline=TOKENS@HOURS]\n"                               \
    "                         [--batch B] [--microbatches M|auto] [--stages N]\n"                  \
    "                         [--schedule S] [--strategy NAME|all] [--tokens-per-sample T]\n"      \
    "                         [--json]\n\n"                                                        \
    "Chooses which of a catalogue's devices to train a model on: plans every candidate set as\n"  \
    "`stagecraft plan` would with the same flags, prices it, and prints the best set for the\n"    \
    "objective (devices, plan, samples/s, cost per hour and per million tokens) and the Pareto\n"  \
    "front of throughput against cost per hour. With --workers or --job: the coordinator's idle\n" \
    "workers (or a running job's) at their measured speeds, what dropping each one is worth\n"     \
    "and, with --catalog, what adding each of the catalogue's servers is worth.\n"                 \
    "  --model FILE        stagecraft-profile JSON, or a PipeDream graph.txt; with --workers a\n"  \
    "                      stagecraft-job file (its model is profiled on the workers)\n"           \
    "  --catalog FILE      stagecraft-cluster JSON whose device types carry price_per_hour\n"      \
    "                      (servers may name a zone; docs/reference/formats.md)\n"                 \
    "  --workers           the coordinator's idle workers, with their measured speeds\n"           \
    "  --job JOB           a running job's workers, with the speeds its training measured\n"       \
    "  --coordinator H:P   with --workers or --job (default STAGECRAFT_COORDINATOR, else\n"        \
    "                      127.0.0.1:7070)\n"                                                      \
    "  --objective O       throughput (default): most samples/s; cost: least cost per sample;\n"   \
    "                      min-cost-at=S: least cost per hour at >= S samples/s;\n"               \
    "                      max-throughput-at=C: most samples/s at <= C per hour;\n"               \
    "                      deadline=TOKENS@HOURS: least cost to train TOKENS within HOURS\n"       \
    "  --batch B, --microbatches M|auto, --stages N, --schedule S: as for plan\n"                  \
    "  --strategy NAME     the planner's strategy (default hetero), or all (slow: the fastest)\n" \
    "  --tokens-per-sample T  tokens in one sample (costs per million tokens; default: costs\n"    \
    "                      per million samples)\n"                                                 \
    "  --json              print {\"best\", \"pareto\", \"search\"} (docs/reference/formats.md)\n"    \
    "Exit status: 0 ok, 1 runtime failure, 2 bad usage or input, or no set meets the objective.\n"
int cmd_advise(const cli_command *self, int argc, char **argv);

#define CMD_DEMO_USAGE                                                                             \
    "usage: stagecraft demo [--workers N] [--steps N] [--data FILE] [--device auto|cpu|cuda]\n"    \
    "                       [--finetune DIR|none] [--finetune-steps N] [--keep]\n"                 \
    "                       [--cpu-kernels fast|reference]\n\n"                                    \
    "Starts a coordinator and N workers (default 4) on this machine, trains a small GPT on the\n"  \
    "bytes of a text file with a planned N-stage pipeline, shows step, loss and throughput as\n"   \
    "it goes, and ends with a summary: plan, predicted vs measured iteration time, loss curve.\n"  \
    "Then fine-tunes a Hugging Face checkpoint folder of a small Llama (96-token vocabulary:\n"    \
    "the text's printable ASCII) as a 2-stage job on the same workers, exports the job's\n"        \
    "checkpoint (export JOB) and shows the loss on held-out text before and after.\n"              \
    "  --steps N      training steps (default 300)\n"                                              \
    "  --data FILE    text to train on (default "                                                  \
    "/usr/share/common-licenses/GPL-3"                                                             \
    ")\n"                                                                                          \
    "  --device D     auto (a GPU when there is one), cpu or cuda\n"                               \
    "  --finetune DIR the checkpoint folder to fine-tune (default: the source tree's\n"            \
    "                 tests/data/hf/llama-tied, when this binary was built in it); none: skip\n"   \
    "  --finetune-steps N  fine-tuning steps (default 500)\n"                                      \
    "  --keep         keep the scratch folder with the logs (and the exported folder)\n"           \
    "  --cpu-kernels K fast (default: OpenBLAS, threaded) or reference (the fixed-order\n"         \
    "                 kernels, single-threaded: same bits on every build)\n"
int cmd_demo(const cli_command *self, int argc, char **argv);

#endif /* SC_CLI_COMMANDS_H */
