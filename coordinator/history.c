/* Thinning a job's training series (history.h). */
#include "coordinator/history.h"

size_t coord_history_thin(coord_history_point *pts, size_t n)
{
    if (n <= 2)
        return n;
    size_t kept = 0;
    for (size_t i = 0; i < n; i += 2)
        pts[kept++] = pts[i];
    if ((n - 1) % 2 != 0) /* the newest was skipped: it always stays */
        pts[kept++] = pts[n - 1];
    return kept;
}
