/*
 * topo_xml: checks hwloc XML from outside (a file, a worker's registration report) before
 * hwloc's own reader sees it.
 *
 * hwloc 2.9's reader trusts its input: a missing set attribute crashes it, deep nesting
 * recurses without bound, an oversized distance matrix allocates its square before any
 * check. This module refuses such input with a message naming the source and line.
 *
 * What it does not do: it does not build a topology, and it does not repeat every
 * consistency check hwloc makes (a distance matrix with the wrong value count still reaches
 * hwloc, which refuses it).
 *
 * Key invariant: memory and stack used are bounded by the input size (one pass, no recursion),
 * and text that passes never makes hwloc read an object without its sets, an attribute it
 * parses differently from this scanner, or an element it does not know.
 */
#ifndef SC_TOPO_XML_H
#define SC_TOPO_XML_H

#include <stddef.h>

#include "common/sc_status.h"

/* Largest XML export accepted (a 16-GPU DGX-2 export is about 40 KiB). */
#define TOPO_XML_MAX_BYTES (16u * 1024u * 1024u)
/* Deepest element nesting accepted (real exports stay below 40). */
#define TOPO_XML_MAX_DEPTH 256
/* Largest PCIe link speed accepted, GB/s (a PCIe 6.0 x16 link is about 128). */
#define TOPO_XML_MAX_LINK_GBS 1e4
/* Largest local_memory of one NUMA node accepted (bytes): 1 PB. */
#define TOPO_XML_MAX_NODE_BYTES 1000000000000000ull

/* Checks `len` bytes of untrusted XML text (no NUL needed): size (max_bytes, 0 for
 * TOPO_XML_MAX_BYTES), nesting depth, DTD/entity declarations, known elements and strict
 * attribute syntax, sets of CPU-side objects, PCIe link speeds, NUMA node memory sizes, tree shape,
 * duplicate object ids (gp_index), distance matrix sizes, and the root element's version (below 3).
 * `source` names the text in errors. Errors: SC_ERR_TOO_LARGE, SC_ERR_VERSION, SC_ERR_PARSE,
 * SC_ERR_NOMEM. */
sc_status topo_xml_check(const char *text, size_t len, size_t max_bytes, const char *source,
                         sc_err *err);

/* Length of a UTF-8 byte-order mark at the start of `text` (3), else 0. Editors on some systems
 * write one; the check skips it, and so must whatever hands the text to hwloc. */
size_t topo_xml_bom(const char *text, size_t len);

#endif /* SC_TOPO_XML_H */
