/* The jobs' speed models (see speeds.h). */
#include "coordinator/speeds.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_clock.h"
#include "common/sc_util.h"

#define LINK_MEDIAN 5 /* a link's (an all-reduce's) figure follows the median of its last samples */

typedef struct {
    char id[COORD_ID_MAX];
    char *profile_json;
    double link, scale;
    double link0; /* its first probed link in the job (0: none yet) */
    double ref; /* busy seconds per profiled second when first measured; 0: not yet */
    bool has_quota; /* its reports said its CPU quota (below); false: as it registered */
    double quota_fraction, quota_period_s;
    /* the all-reduce of the copies it ran with (coord_speeds_reduce_sample): the last samples'
     * seconds per byte of the planner's measure, and their smoothed figure */
    double reduce_recent[LINK_MEDIAN];
    double reduce_s_per_byte;
    unsigned reduce_n;
} worker_speed;

#define MOVE_WINDOW_S 60.0
#define CLOCK_WINDOW_S 30.0 /* a clock estimate keeps the best sample of the last 30-60 s */
#define LINK_ALPHA 0.2      /* weight of a new sample in a link's smoothed figure */
#define LINK_BASE_N 8       /* samples before a link has a reference */
#define CLOCK_ID_MAX 48
/* Sample x joins recent[] (its (n+1)-th; the oldest of LINK_MEDIAN overwritten) and the median
 * of those held (`least`: their least) goes into the average `avg` (LINK_ALPHA; the first
 * sample is the average). Returns the new average. */
static double smooth_recent(double *recent, unsigned n, double x, bool least, double avg)
{
    recent[n % LINK_MEDIAN] = x;
    size_t k = n + 1 < LINK_MEDIAN ? n + 1 : LINK_MEDIAN;
    double sorted[LINK_MEDIAN];
    memcpy(sorted, recent, k * sizeof *sorted);
    for (size_t i = 1; i < k; i++) /* insertion sort of at most 5 */
        for (size_t m = i; m > 0 && sorted[m - 1] > sorted[m]; m--) {
            double t = sorted[m];
            sorted[m] = sorted[m - 1];
            sorted[m - 1] = t;
        }
    double mid = least ? sorted[0] : k % 2 ? sorted[k / 2] : (sorted[k / 2 - 1] + sorted[k / 2]) / 2;
    return n == 0 ? mid : LINK_ALPHA * mid + (1 - LINK_ALPHA) * avg;
}

/* A worker's clock against the coordinator's: the largest (stamp - arrival) of its control
 * messages in the current window and in the one before (each is the offset less that message's
 * one-way delay and queueing; the largest is the least delayed). */
typedef struct {
    char id[COORD_ID_MAX], clock_id[CLOCK_ID_MAX];
    double cur, prev; /* seconds; valid when has_cur / has_prev */
    bool has_cur, has_prev;
    double window_s; /* when the current window began (sc_clock_now_s) */
} worker_clock;

typedef struct {
    char from[COORD_ID_MAX], to[COORD_ID_MAX];
    double recent[LINK_MEDIAN]; /* the last samples' transit per byte, oldest overwritten */
    double s_per_byte;          /* smoothed transit per byte */
    double ref, adopted;        /* bytes/s; 0: none yet */
    double bytes;
    unsigned messages, samples;
} link_speed;

struct coord_speeds {
    char job_id[COORD_ID_MAX];
    double last_move_s; /* sc_clock_now_s() of its last rebalance decided by itself */
    int streak;         /* such moves in a row, each within MOVE_WINDOW_S of the last */
    double paused_s;    /* when the move under way had every stage paused (0: none) */
    double move_cost_s; /* the last move's measured cost (0: none measured) */
    worker_speed *w;
    size_t n;
    worker_clock *clk;
    size_t n_clk;
    link_speed *l;
    size_t n_l;
    coord_speeds *next;
};

static coord_speeds *job_of(const coord_speeds *all, const char *job_id)
{
    for (const coord_speeds *j = all; j != NULL; j = j->next)
        if (strcmp(j->job_id, job_id) == 0)
            return (coord_speeds *)j;
    return NULL;
}

static worker_speed *worker_of(const coord_speeds *j, const char *id)
{
    for (size_t i = 0; j != NULL && i < j->n; i++)
        if (strcmp(j->w[i].id, id) == 0)
            return &j->w[i];
    return NULL;
}

/* A fresh probe of worker `id` is its link now: the measured links from and to it start again
 * (both directions: the probe timed both, and a link's slowness may be either end's). */
static void links_restart(coord_speeds *j, const char *id);

static void job_free(coord_speeds *j)
{
    for (size_t i = 0; i < j->n; i++)
        free(j->w[i].profile_json);
    free(j->w);
    free(j->clk);
    free(j->l);
    free(j);
}

void coord_speeds_free(coord_speeds **all)
{
    while (*all != NULL) {
        coord_speeds *j = *all;
        *all = j->next;
        job_free(j);
    }
}

void coord_speeds_keep(coord_speeds **all, const char *job_id, const char *const *ids,
                       const char *const *profiles, const double *links, size_t n)
{
    coord_speeds *j = job_of(*all, job_id);
    if (j == NULL) {
        j = calloc(1, sizeof *j);
        if (j == NULL)
            return;
        sc_strlcpy(j->job_id, job_id, sizeof j->job_id);
        j->next = *all;
        *all = j;
    }
    for (size_t i = 0; i < n; i++) {
        if (profiles[i] == NULL)
            continue;
        worker_speed *w = worker_of(j, ids[i]);
        if (w == NULL) {
            worker_speed *more = realloc(j->w, (j->n + 1) * sizeof *more);
            if (more == NULL)
                return;
            j->w = more;
            w = &j->w[j->n++];
            memset(w, 0, sizeof *w);
            sc_strlcpy(w->id, ids[i], sizeof w->id);
        }
        free(w->profile_json);
        w->profile_json = strdup(profiles[i]);
        w->link = links[i];
        if (w->link0 <= 0)
            w->link0 = links[i];
        w->scale = 1.0;
        w->ref = 0;
        w->reduce_n = 0; /* its all-reduce too is measured again at its speed now */
        w->reduce_s_per_byte = 0;
        links_restart(j, ids[i]);
    }
}

void coord_speeds_links_restart(coord_speeds *all, const char *job_id, const char *id)
{
    coord_speeds *j = job_of(all, job_id);
    if (j != NULL)
        links_restart(j, id);
}

void coord_speeds_set_link(coord_speeds *all, const char *job_id, const char *id, double link)
{
    coord_speeds *j = job_of(all, job_id);
    worker_speed *w = worker_of(j, id);
    if (w == NULL || !(link > 0))
        return;
    w->link = link;
    if (w->link0 <= 0)
        w->link0 = link;
    links_restart(j, id);
}

bool coord_speeds_link_suspect(const coord_speeds *all, const char *job_id, const char *id,
                               double change)
{
    const coord_speeds *j = job_of(all, job_id);
    const worker_speed *w = worker_of(j, id);
    if (w == NULL)
        return false;
    if (w->link0 > 0 && w->link < w->link0 / (1 + change))
        return true;
    for (size_t i = 0; i < j->n_l; i++) {
        const link_speed *l = &j->l[i];
        if ((strcmp(l->from, id) == 0 || strcmp(l->to, id) == 0) && l->ref > 0 && l->adopted > 0 &&
            l->adopted < l->ref / (1 + change))
            return true;
    }
    return false;
}

static void scale_node(json_t *node, double factor)
{
    if (json_is_array(node)) {
        for (size_t i = 0; i < json_array_size(node); i++)
            scale_node(json_array_get(node, i), factor);
        return;
    }
    if (!json_is_object(node))
        return;
    const char *key;
    json_t *v;
    json_object_foreach(node, key, v)
    {
        size_t len = strlen(key);
        if (json_is_number(v) && len > 2 && strcmp(key + len - 2, "_s") == 0)
            json_object_set_new(node, key, json_real(json_number_value(v) * factor));
        else
            scale_node(v, factor);
    }
}

char *coord_profile_scaled(const char *profile_json, double factor)
{
    json_t *root = json_loads(profile_json, 0, NULL);
    if (root == NULL)
        return NULL;
    scale_node(json_object_get(root, "blocks"), factor);
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return text;
}

char *coord_speeds_profile(const coord_speeds *all, const char *job_id, const char *id,
                           double *link)
{
    const worker_speed *w = worker_of(job_of(all, job_id), id);
    if (w == NULL || w->profile_json == NULL)
        return NULL;
    /* an unprobed link (0) stays unknown: the plan takes the NIC's reported figure */
    *link = w->link * coord_speeds_link_factor(all, job_id, id, false);
    return w->scale == 1.0 ? strdup(w->profile_json)
                           : coord_profile_scaled(w->profile_json, w->scale);
}

double coord_speeds_scale(const coord_speeds *all, const char *job_id, const char *id)
{
    const worker_speed *w = worker_of(job_of(all, job_id), id);
    return w != NULL ? w->scale : 1.0;
}

void coord_speeds_set_scale(coord_speeds *all, const char *job_id, const char *id, double scale)
{
    worker_speed *w = worker_of(job_of(all, job_id), id);
    if (w != NULL && scale > 0)
        w->scale = scale;
}

void coord_speeds_set_quota(coord_speeds *all, const char *job_id, const char *id, double fraction,
                            double period_s)
{
    worker_speed *w = worker_of(job_of(all, job_id), id);
    if (w == NULL)
        return;
    w->has_quota = true;
    w->quota_fraction = fraction > 0 && fraction < 1 && period_s > 0 ? fraction : 0;
    w->quota_period_s = w->quota_fraction > 0 ? period_s : 0;
}

bool coord_speeds_quota(const coord_speeds *all, const char *job_id, const char *id,
                        double *fraction, double *period_s)
{
    const worker_speed *w = worker_of(job_of(all, job_id), id);
    if (w == NULL || !w->has_quota)
        return false;
    *fraction = w->quota_fraction;
    *period_s = w->quota_period_s;
    return true;
}

double coord_speeds_work_s(const coord_speeds *all, const char *job_id, const char *id, int first,
                           int last)
{
    const worker_speed *w = worker_of(job_of(all, job_id), id);
    if (w == NULL || w->profile_json == NULL)
        return 0;
    json_t *root = json_loads(w->profile_json, 0, NULL);
    json_t *blocks = json_object_get(root, "blocks");
    double mb = json_number_value(json_object_get(root, "microbatch_size"));
    double total = 0;
    for (int i = first; i <= last && i >= 0 && (size_t)i < json_array_size(blocks); i++) {
        json_t *b = json_array_get(blocks, (size_t)i);
        total += json_number_value(json_object_get(b, "forward_s")) +
                 json_number_value(json_object_get(b, "backward_s"));
    }
    json_decref(root);
    return mb > 0 ? total / mb : 0;
}

double coord_speeds_reference(coord_speeds *all, const char *job_id, const char *id, double ratio)
{
    worker_speed *w = worker_of(job_of(all, job_id), id);
    if (w == NULL)
        return 0;
    if (w->ref <= 0 && ratio > 0)
        w->ref = ratio;
    return w->ref;
}

void coord_speeds_drop(coord_speeds **all, const char *job_id)
{
    for (coord_speeds **p = all; *p != NULL; p = &(*p)->next) {
        if (strcmp((*p)->job_id, job_id) == 0) {
            coord_speeds *j = *p;
            *p = j->next;
            job_free(j);
            return;
        }
    }
}

bool coord_speeds_known(const coord_speeds *all, const char *job_id, const char *id)
{
    const worker_speed *w = worker_of(job_of(all, job_id), id);
    return w != NULL && w->profile_json != NULL;
}

double coord_profile_total_s(const char *profile_json)
{
    json_t *root = json_loads(profile_json, 0, NULL);
    json_t *blocks = json_object_get(root, "blocks");
    double total = 0;
    for (size_t i = 0; i < json_array_size(blocks); i++) {
        json_t *b = json_array_get(blocks, i);
        total += json_number_value(json_object_get(b, "forward_s")) +
                 json_number_value(json_object_get(b, "backward_s"));
    }
    json_decref(root);
    return total;
}

void coord_speeds_note_move(coord_speeds *all, const char *job_id)
{
    coord_speeds *j = job_of(all, job_id);
    if (j == NULL)
        return;
    double now = sc_clock_now_s();
    j->streak = j->last_move_s > 0 && now - j->last_move_s < MOVE_WINDOW_S ? j->streak + 1 : 1;
    j->last_move_s = now;
}

double coord_speeds_gain_needed(const coord_speeds *all, const char *job_id, double base)
{
    const coord_speeds *j = job_of(all, job_id);
    if (j == NULL || j->last_move_s <= 0 || sc_clock_now_s() - j->last_move_s >= MOVE_WINDOW_S)
        return base;
    double needed = base; /* one move is no row: the second in a row doubles the bar */
    for (int i = 1; i < j->streak && needed < 0.8; i++)
        needed *= 2;
    return needed < 0.8 ? needed : 0.8;
}

void coord_speeds_paused(coord_speeds *all, const char *job_id)
{
    coord_speeds *j = job_of(all, job_id);
    if (j != NULL)
        j->paused_s = sc_clock_now_s();
}

void coord_speeds_moved(coord_speeds *all, const char *job_id)
{
    coord_speeds *j = job_of(all, job_id);
    if (j == NULL || j->paused_s <= 0)
        return;
    j->move_cost_s = sc_clock_now_s() - j->paused_s;
    j->paused_s = 0;
}

double coord_speeds_move_cost(const coord_speeds *all, const char *job_id)
{
    const coord_speeds *j = job_of(all, job_id);
    return j != NULL ? j->move_cost_s : 0;
}

/* ---- links ---- */

static worker_clock *clock_of(const coord_speeds *j, const char *id)
{
    for (size_t i = 0; j != NULL && i < j->n_clk; i++)
        if (strcmp(j->clk[i].id, id) == 0)
            return &j->clk[i];
    return NULL;
}

void coord_speeds_clock(coord_speeds *all, const char *job_id, const char *id, const char *clock_id,
                        uint64_t sent_ns, uint64_t received_ns)
{
    coord_speeds *j = job_of(all, job_id);
    if (j == NULL || sent_ns == 0)
        return;
    worker_clock *k = clock_of(j, id);
    double now = sc_clock_now_s();
    if (k == NULL) {
        worker_clock *more = realloc(j->clk, (j->n_clk + 1) * sizeof *more);
        if (more == NULL)
            return;
        j->clk = more;
        k = &j->clk[j->n_clk++];
        memset(k, 0, sizeof *k);
        sc_strlcpy(k->id, id, sizeof k->id);
        k->window_s = now;
    }
    if (clock_id != NULL && clock_id[0] != '\0')
        sc_strlcpy(k->clock_id, clock_id, sizeof k->clock_id);
    if (now - k->window_s >= CLOCK_WINDOW_S) { /* the clocks drift: old samples age out */
        k->prev = k->cur, k->has_prev = k->has_cur;
        k->has_cur = false;
        k->window_s = now;
    }
    double d = ((double)sent_ns - (double)received_ns) * 1e-9;
    if (!k->has_cur || d > k->cur)
        k->cur = d, k->has_cur = true;
}

/* A worker's clock minus the coordinator's, less the least one-way delay seen (false: none). */
static bool offset_of(const worker_clock *k, double *out)
{
    if (k == NULL || (!k->has_cur && !k->has_prev))
        return false;
    *out = k->has_cur && (!k->has_prev || k->cur > k->prev) ? k->cur : k->prev;
    return true;
}

bool coord_speeds_transit(const coord_speeds *all, const char *job_id, const char *from,
                          const char *to, double delay_s, double *transit_s)
{
    const coord_speeds *j = job_of(all, job_id);
    const worker_clock *a = clock_of(j, from), *b = clock_of(j, to);
    if (a != NULL && b != NULL && a->clock_id[0] != '\0' && strcmp(a->clock_id, b->clock_id) == 0) {
        *transit_s = delay_s; /* one kernel, one monotonic clock */
        return true;
    }
    double oa, ob;
    if (!offset_of(a, &oa) || !offset_of(b, &ob))
        return false;
    /* delay = transit + (to's clock - from's clock) */
    *transit_s = delay_s - (ob - oa);
    return true;
}

static link_speed *link_of(const coord_speeds *j, const char *from, const char *to)
{
    for (size_t i = 0; j != NULL && i < j->n_l; i++)
        if (strcmp(j->l[i].from, from) == 0 && strcmp(j->l[i].to, to) == 0)
            return &j->l[i];
    return NULL;
}

void coord_speeds_link_sample(coord_speeds *all, const char *job_id, const char *from,
                              const char *to, double bytes, double transit_s, unsigned messages,
                              bool capped)
{
    coord_speeds *j = job_of(all, job_id);
    if (j == NULL || !(transit_s > 0) || !(bytes > 0))
        return;
    link_speed *l = link_of(j, from, to);
    if (l == NULL) {
        link_speed *more = realloc(j->l, (j->n_l + 1) * sizeof *more);
        if (more == NULL)
            return;
        j->l = more;
        l = &j->l[j->n_l++];
        memset(l, 0, sizeof *l);
        sc_strlcpy(l->from, from, sizeof l->from);
        sc_strlcpy(l->to, to, sizeof l->to);
    }
    /* the median of the last samples goes into the average: one late message (the receiver
     * descheduled as it arrived, a retransmission) moves nothing, a change moves it from its
     * third sample on. Between capped workers most transits may hold an end's throttled spell,
     * a delay that only ever adds: there the least of the last samples goes in (a slowdown
     * shows once all of them are slow) */
    l->s_per_byte = smooth_recent(l->recent, l->samples, transit_s / bytes, capped, l->s_per_byte);
    l->bytes = bytes;
    l->messages = messages;
    if (++l->samples == LINK_BASE_N && l->ref <= 0)
        l->ref = 1 / l->s_per_byte;
}

/* A link's figures as the view shows them. */
static void link_view(const link_speed *l, coord_link_speed *v)
{
    memset(v, 0, sizeof *v);
    sc_strlcpy(v->from, l->from, sizeof v->from);
    sc_strlcpy(v->to, l->to, sizeof v->to);
    v->measured = l->s_per_byte > 0 ? 1 / l->s_per_byte : 0;
    v->reference = l->ref;
    v->expected = l->adopted > 0 ? l->adopted : l->ref;
    v->bytes = l->bytes;
    v->messages = l->messages;
    v->samples = l->samples;
}

size_t coord_speeds_links(const coord_speeds *all, const char *job_id, coord_link_speed *out,
                          size_t max)
{
    const coord_speeds *j = job_of(all, job_id);
    size_t n = 0;
    for (size_t i = 0; j != NULL && i < j->n_l && n < max; i++)
        if (j->l[i].ref > 0)
            link_view(&j->l[i], &out[n++]);
    return n;
}

double coord_speeds_link_factor(const coord_speeds *all, const char *job_id, const char *id,
                                bool measured)
{
    const coord_speeds *j = job_of(all, job_id);
    double f = 0;
    for (size_t i = 0; j != NULL && i < j->n_l; i++) {
        if (j->l[i].ref <= 0 || strcmp(j->l[i].from, id) != 0)
            continue;
        coord_link_speed v;
        link_view(&j->l[i], &v);
        double r = (measured ? v.measured : v.expected) / v.reference;
        f = f == 0 || r < f ? r : f;
    }
    return f > 0 ? f : 1;
}

void coord_speeds_links_adopt(coord_speeds *all, const char *job_id, double change)
{
    coord_speeds *j = job_of(all, job_id);
    for (size_t i = 0; j != NULL && i < j->n_l; i++) {
        link_speed *l = &j->l[i];
        if (l->ref <= 0 || l->s_per_byte <= 0)
            continue;
        double now = 1 / l->s_per_byte;
        /* within `change` of its reference it is the link it was: noise is not adopted */
        l->adopted = now > l->ref / (1 + change) && now < l->ref * (1 + change) ? 0 : now;
    }
}

static void links_restart(coord_speeds *j, const char *id)
{
    for (size_t k = 0; k < j->n_l; k++)
        if (strcmp(j->l[k].from, id) == 0 || strcmp(j->l[k].to, id) == 0)
            j->l[k].ref = j->l[k].adopted = 0, j->l[k].samples = 0;
}

/* The planner's measure of an all-reduce of `bytes` bytes between `copies` copies: the bytes it
 * takes at 1 byte/s (4 (r-1) W / r, coordinator/planner's allreduce_s). */
static double reduce_measure(double bytes, int copies)
{
    return 4.0 * (copies - 1) * bytes / copies;
}

void coord_speeds_reduce_sample(coord_speeds *all, const char *job_id, const char *id, int copies,
                                double bytes, double seconds)
{
    worker_speed *w = worker_of(job_of(all, job_id), id);
    if (w == NULL || copies < 2 || !(bytes > 0) || !(seconds > 0))
        return;
    w->reduce_s_per_byte = smooth_recent(w->reduce_recent, w->reduce_n,
                                         seconds / reduce_measure(bytes, copies), false,
                                         w->reduce_s_per_byte);
    w->reduce_n++;
}

double coord_speeds_reduce_bw(const coord_speeds *all, const char *job_id, const char *id)
{
    const worker_speed *w = worker_of(job_of(all, job_id), id);
    return w != NULL && w->reduce_n >= LINK_MEDIAN && w->reduce_s_per_byte > 0
               ? 1 / w->reduce_s_per_byte
               : 0;
}

double coord_speeds_reduce_s(const coord_speeds *all, const char *job_id, const char *id,
                             int copies, double bytes)
{
    double bw = coord_speeds_reduce_bw(all, job_id, id);
    return bw > 0 && copies > 1 ? reduce_measure(bytes, copies) / bw : 0;
}
