/*
 * plan_ga_batch: the batched evaluator (plan_ga_eval_batch) and the population storage it reads
 * (plan_ga_batch_*).
 *
 * Evaluates many individuals at a time, portable (four side by side) or AVX2 (sixteen in
 * structure-of-arrays form); both give plan_ga_eval_one's times bit for bit, and hand an
 * individual they cannot represent (int16 prefix sums that saturate) to plan_ga_eval_one.
 * Does not search (plan_ga.c) and does not define the recurrence (plan_ga_eval.c is its
 * specification). The hot loops and what they call are static in this file so that they inline.
 * Invariant: every floating-point operation of an individual is plan_ga_eval_one's, in the
 * same order.
 */
#include "coordinator/planner/plan_ga.h"

#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/plan_ga_internal.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* The batch holds the population itself, one individual after another (x then y, as the
 * search keeps them). plan_ga_eval_batch has two code paths, chosen per batch (the fastest
 * this CPU runs, unless plan_ga_batch_use_kernel says otherwise); both give the scalar
 * evaluator's times bit for bit, because every floating-point operation is its, in the same
 * order per individual (max and add are exact in any vector width).
 *
 * Portable (any CPU): GA_QUAD individuals side by side, stage by stage. Per lane, the prefix
 * sums (int16, eight to an SSE register) and a branch-free count of the upstream entries that
 * end before each entry (the upstream entry it waits for); then the lanes run the recurrence
 * in step, so that their max-then-add chains overlap.
 *
 * AVX2 (x86-64 CPUs that have it): GA_LANES individuals (a group) held in
 * structure-of-arrays form, [entry][lane], so that one instruction does one step for every
 * lane; the individuals are taken in order of their first row's entry count, so that a
 * group's rows tend to be equally long. For each stage of a group:
 *   1. the rows are transposed to int16 (sixteen lanes to a vector), and in step over the
 *      entries: which lanes are still in their row, the prefix sums (saturating; an
 *      individual whose sums reach 32767 is evaluated by plan_ga_eval_one instead), the
 *      samples over the memory cap, and the wait index: the count of upstream ends below the
 *      entry's sum. That count never decreases along a row, so each entry starts from the
 *      count every lane has reached and compares on only while some lane still counts; where
 *      the rows upstream are of unlike lengths, that loop would stop at a different place for
 *      each entry (a mispredicted branch each), so every upstream end is compared instead.
 *      The stage's sums are kept for the next one with 32767 from each row's last entry on,
 *      so that no lane counts past its row;
 *   2. the recurrence for the sixteen lanes in four vectors of doubles, one entry per step.
 *      An entry's time and transfer (interleaved once per call, so that one 16-byte load gives
 *      both) and the arrival it waits for are scalar loads put together by shuffles: on Zen 3
 *      the AVX2 gather instruction is slower than the same loads. Past a lane's last entry
 *      its F is kept (a blend); its A is never read. */

#define GA_QUAD 4   /* portable: individuals side by side */
#define GA_LANES 16 /* AVX2: individuals in a group */
#define GA_KP GA_MAX_K
/* int16 prefix sums: an individual whose rows sum to this or more goes to plan_ga_eval_one */
#define GA_CUM_MAX 32767

#if defined(__x86_64__)
#define GA_HAVE_AVX2 1
#else
#define GA_HAVE_AVX2 0
#endif

/* The AVX2 path's state for one group, [entry][lane]. */
typedef struct ga_group {
    int16_t cum[2][GA_KP][GA_LANES]; /* prefix sums upstream / here, 32767 from a row's last */
    /* per entry: its (time, transfer) pair in the stage's table (low half, 2 * size) and the
     * arrival it waits for upstream (high half, GA_LANES * entry); lanes in the order that
     * unpacking two vectors of sixteen gives, 0-3, 8-11, 4-7, 12-15 */
    uint32_t idx[GA_KP][GA_LANES];
    double arr[2][GA_KP][GA_LANES]; /* arrival downstream of each entry, upstream / here */
    int16_t cnt[GA_LANES];          /* entries per lane: upstream until step 1 sets them */
    int32_t over[GA_LANES];         /* samples over the cap, this stage */
    int16_t wide[GA_LANES];         /* a prefix sum reached GA_CUM_MAX, this stage */
} ga_group;

struct plan_ga_batch {
    int n_cap, S, K, W;
    plan_ga_kernel kernel;
    int *ind; /* (n_cap, 2, S, K), then GA_KP zeros: vector loads past a row stay inside */
    /* portable path: one block of GA_QUAD lanes */
    int KP;          /* K rounded up to 16 */
    int16_t *cum[2]; /* (GA_QUAD, KP): prefix sums of the stage upstream / this stage */
    int16_t *kst;    /* (GA_QUAD, KP): upstream entry each entry waits for */
    int *cnt[2];     /* (GA_QUAD): entries per lane, upstream / this stage */
    double *arr[2];  /* (K, GA_QUAD): arrival downstream of each entry, upstream / here */
    double *fend;    /* (S, GA_QUAD): last forward end per stage */
    /* AVX2 path */
    double *tc;    /* (2, S, W, 2): per direction and stage, time and transfer of x samples */
    int *order;    /* (n_cap): individuals by their first row's entry count */
    int *key;      /* (n_cap): that count */
    ga_group *grp; /* the group being evaluated */
    double *gfend; /* (S, GA_LANES): the group's last forward end per stage */
};

static plan_ga_kernel kernel_best(void)
{
#if GA_HAVE_AVX2
    if (__builtin_cpu_supports("avx2"))
        return PLAN_GA_KERNEL_AVX2;
#endif
    return PLAN_GA_KERNEL_PORTABLE;
}

sc_status plan_ga_batch_new(plan_ga_batch **out, const plan_ga_problem *p, int n, sc_err *err)
{
    *out = NULL;
    if (p->max_entries > GA_MAX_K || p->max_entries < 1)
        return SC_ERRF(err, SC_ERR_INVALID, "umpipe: max_entries must be 1-%d, got %d", GA_MAX_K,
                       p->max_entries);
    if (n < 1 || p->n_stages < 1 || p->batch < 1)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "umpipe: needs a population, stages and batch >= 1, got %d, %d and %d", n,
                       p->n_stages, p->batch);
    plan_ga_batch *b = calloc(1, sizeof *b);
    SC_ALLOC_CHECK(b, err);
    b->n_cap = n;
    b->S = p->n_stages;
    b->K = p->max_entries;
    b->W = p->batch + 1;
    b->KP = (b->K + 15) & ~15;
    b->kernel = kernel_best();
    size_t S = (size_t)b->S, K = (size_t)b->K, KP = (size_t)b->KP, Q = GA_QUAD;
    b->ind = calloc((size_t)n * 2 * S * K + GA_KP, sizeof(int));
    b->kst = calloc(Q * KP, sizeof(int16_t));
    b->fend = calloc(S * Q, sizeof(double));
    int ok = b->ind && b->kst && b->fend;
    for (int c = 0; c < 2; c++) {
        b->cum[c] = calloc(Q * KP, sizeof(int16_t));
        b->cnt[c] = calloc(Q, sizeof(int));
        b->arr[c] = calloc(K * Q, sizeof(double));
        ok = ok && b->cum[c] && b->cnt[c] && b->arr[c];
    }
    if (GA_HAVE_AVX2) {
        b->tc = calloc(2 * S * 2 * (size_t)b->W, sizeof(double));
        b->order = calloc((size_t)n, sizeof(int));
        b->key = calloc((size_t)n, sizeof(int));
        b->grp = calloc(1, sizeof *b->grp);
        b->gfend = calloc(S * GA_LANES, sizeof(double));
        ok = ok && b->tc && b->order && b->key && b->grp && b->gfend;
    }
    if (!ok) {
        plan_ga_batch_destroy(&b);
        return SC_ERRF(err, SC_ERR_NOMEM, "umpipe: out of memory for a population of %d", n);
    }
    *out = b;
    return SC_OK;
}

void plan_ga_batch_destroy(plan_ga_batch **bp)
{
    if (bp == NULL || *bp == NULL)
        return;
    plan_ga_batch *b = *bp;
    free(b->ind), free(b->kst), free(b->fend);
    for (int c = 0; c < 2; c++)
        free(b->cum[c]), free(b->cnt[c]), free(b->arr[c]);
    free(b->tc), free(b->order), free(b->key), free(b->grp), free(b->gfend);
    free(b);
    *bp = NULL;
}

int *plan_ga_batch_individual(plan_ga_batch *b, int i)
{
    return b->ind + (size_t)i * 2 * (size_t)b->S * (size_t)b->K;
}

void plan_ga_batch_set(plan_ga_batch *b, int i, const int *x, const int *y)
{
    size_t row = (size_t)b->S * (size_t)b->K;
    int *d = plan_ga_batch_individual(b, i);
    memcpy(d, x, row * sizeof(int));
    memcpy(d + row, y, row * sizeof(int));
}

int plan_ga_batch_use_kernel(plan_ga_batch *b, plan_ga_kernel k)
{
    if (k == PLAN_GA_KERNEL_AUTO)
        k = kernel_best();
    if (k != PLAN_GA_KERNEL_PORTABLE && k != kernel_best())
        return 0;
    b->kernel = k;
    return 1;
}

plan_ga_kernel plan_ga_batch_kernel(const plan_ga_batch *b)
{
    return b->kernel;
}

const char *plan_ga_kernel_name(plan_ga_kernel k)
{
    return k == PLAN_GA_KERNEL_AVX2 ? "avx2" : k == PLAN_GA_KERNEL_PORTABLE ? "portable" : "auto";
}

/* ---------------------------------------------------------------- portable path */

/* Step 1 for one lane: entry count, prefix sums (clamped; *wide is set when a sum does not
 * fit), samples over the cap. */
static int lane_prefix(const int *restrict r, int K, int cap, int16_t *restrict cv, int64_t *over,
                       int *wide)
{
    int64_t c = 0, ov = 0;
    int n = 0;
    for (; n < K && r[n] > 0; n++) {
        c += r[n];
        cv[n] = (int16_t)(c < GA_CUM_MAX ? c : GA_CUM_MAX);
        ov += r[n] > cap ? (int64_t)r[n] - cap : 0;
    }
    *over += ov;
    *wide |= c >= GA_CUM_MAX;
    return n;
}

/* Eight int16 counters in one SSE register (a GCC vector type: plain SSE2 code, and plain
 * scalar code on targets without vectors). */
typedef int16_t ga_v8 __attribute__((vector_size(16)));

static void lane_waits(const int16_t *restrict cv, int n, const int16_t *restrict uv, int nu,
                       int16_t *restrict kv)
{
    /* sixteen entries at a time, their counters kept in registers across the upstream ends */
    for (int j0 = 0; j0 < n; j0 += 16) {
        ga_v8 c0, c1, a0 = {0}, a1 = {0};
        memcpy(&c0, cv + j0, sizeof c0);
        memcpy(&c1, cv + j0 + 8, sizeof c1);
        for (int k = 0; k < nu - 1; k++) {
            ga_v8 u = (ga_v8){0} + uv[k];
            a0 += (u < c0); /* true is -1 */
            a1 += (u < c1);
        }
        a0 = -a0;
        a1 = -a1;
        memcpy(kv + j0, &a0, sizeof a0);
        memcpy(kv + j0 + 8, &a1, sizeof a1);
    }
}

/* One stage of a block: rows[v] is lane v's row, t/ct the stage's time and transfer tables,
 * start the lanes' earliest start (0 forward, the forward end backward). Reads the upstream
 * state in b->*[up], writes b->*[!up]. */
static void quad_stage(plan_ga_batch *b, const int *const *rows, const double *restrict t,
                       const double *restrict ct, int cap, const double *restrict start, int up,
                       double *restrict last, int64_t *restrict over, int *restrict wide)
{
    enum { V = GA_QUAD };
    int K = b->K, KP = b->KP, most = 0;
    int16_t *cum = b->cum[!up];
    const int16_t *ucum = b->cum[up];
    int *cnt = b->cnt[!up];
    const int *ucnt = b->cnt[up];
    for (int v = 0; v < V; v++) {
        cnt[v] = lane_prefix(rows[v], K, cap, cum + v * KP, &over[v], &wide[v]);
        lane_waits(cum + v * KP, cnt[v], ucum + v * KP, ucnt[v], b->kst + v * KP);
        most = cnt[v] > most ? cnt[v] : most;
    }
    const double *restrict uarr = b->arr[up];
    double *restrict arr = b->arr[!up];
    const int16_t *restrict kst = b->kst;
    double F[V], A[V];
    for (int v = 0; v < V; v++) {
        F[v] = start[v];
        A[v] = 0;
    }
    /* the lanes are independent: unrolled over them, their chains overlap in the core */
    for (int j = 0; j < most; j++) {
        for (int v = 0; v < V; v++) {
            int live = j < cnt[v];
            int x = live ? rows[v][j] : 0;
            double r = uarr[kst[v * KP + j] * V + v];
            double f = (F[v] > r ? F[v] : r) + t[x];
            double a = (A[v] > f ? A[v] : f) + ct[x];
            F[v] = live ? f : F[v];
            A[v] = live ? a : A[v];
            arr[j * V + v] = A[v];
        }
    }
    for (int v = 0; v < V; v++)
        last[v] = F[v];
}

static void eval_portable(const plan_ga_problem *p, plan_ga_batch *b, int n, double *times_s)
{
    enum { V = GA_QUAD };
    int S = p->n_stages, K = p->max_entries, W = p->batch + 1;
    size_t row = (size_t)S * (size_t)K;
    static const double zero[V];
    for (int q0 = 0; q0 < n; q0 += V) {
        const int *base[V];
        for (int v = 0; v < V; v++) /* a short last block repeats its first individual */
            base[v] = plan_ga_batch_individual(b, q0 + v < n ? q0 + v : q0);
        const int *rows[V];
        int64_t over[V] = {0};
        int wide[V] = {0}, up = 0;
        double endmax[V] = {0}, last[V];
        for (int v = 0; v < V; v++) { /* before stage 0: nothing to wait for */
            b->cnt[up][v] = 0;
            b->arr[up][v] = 0;
        }
        for (int i = 0; i < S; i++) {
            for (int v = 0; v < V; v++)
                rows[v] = base[v] + (size_t)i * K;
            quad_stage(b, rows, p->fwd_s + (size_t)i * W, p->comm_s + (size_t)i * W, p->max_size[i],
                       zero, up, b->fend + (size_t)i * V, over, wide);
            up = !up;
        }
        for (int v = 0; v < V; v++) {
            b->cnt[up][v] = 0;
            b->arr[up][v] = 0;
        }
        for (int i = S - 1; i >= 0; i--) {
            for (int v = 0; v < V; v++)
                rows[v] = base[v] + row + (size_t)i * K;
            /* stage 0 sends nothing back: its transfer table is never read */
            quad_stage(b, rows, p->bwd_s + (size_t)i * W,
                       p->comm_s + (size_t)(i > 0 ? i - 1 : 0) * W, p->max_size[i],
                       b->fend + (size_t)i * V, up, last, over, wide);
            for (int v = 0; v < V; v++)
                endmax[v] = last[v] > endmax[v] ? last[v] : endmax[v];
            up = !up;
        }
        for (int v = 0; v < V && q0 + v < n; v++)
            times_s[q0 + v] = wide[v] ? plan_ga_eval_one(p, base[v], base[v] + row)
                                      : (endmax[v] + p->opt_s) *
                                            (over[v] > 0 ? 2.0 + (double)over[v] / p->batch : 1.0);
    }
}

/* ---------------------------------------------------------------- AVX2 path */

#if GA_HAVE_AVX2
/* In place, a 16x16 int16 transpose: r[i] = row i becomes r[j] = column j. Unpacks pair,
 * then quad, then octet the rows within each 128-bit half, and the halves are swapped last.
 * packed: the rows came from packing two vectors of eight int32 (see stage_avx2), so their
 * halves hold columns 0-3, 8-11 and 4-7, 12-15. */
__attribute__((target("avx2"))) static inline __attribute__((always_inline)) void
transpose16(__m256i r[16], int packed)
{
    __m256i a[16], c[16], lo[8], hi[8];
    for (int v = 0; v < 16; v += 2) {
        a[v] = _mm256_unpacklo_epi16(r[v], r[v + 1]);
        a[v + 1] = _mm256_unpackhi_epi16(r[v], r[v + 1]);
    }
    for (int v = 0; v < 16; v += 4) {
        c[v] = _mm256_unpacklo_epi32(a[v], a[v + 2]);
        c[v + 1] = _mm256_unpackhi_epi32(a[v], a[v + 2]);
        c[v + 2] = _mm256_unpacklo_epi32(a[v + 1], a[v + 3]);
        c[v + 3] = _mm256_unpackhi_epi32(a[v + 1], a[v + 3]);
    }
    for (int q = 0; q < 4; q++) { /* lo[q]: rows 0-7 at position q of each half */
        lo[2 * q] = _mm256_unpacklo_epi64(c[q], c[4 + q]);
        lo[2 * q + 1] = _mm256_unpackhi_epi64(c[q], c[4 + q]);
        hi[2 * q] = _mm256_unpacklo_epi64(c[8 + q], c[12 + q]);
        hi[2 * q + 1] = _mm256_unpackhi_epi64(c[8 + q], c[12 + q]);
    }
    for (int q = 0; q < 8; q++) {
        int e = !packed ? q : q < 4 ? q : q + 4, f = !packed ? q + 8 : e + 4;
        r[e] = _mm256_permute2x128_si256(lo[q], hi[q], 0x20);
        r[f] = _mm256_permute2x128_si256(lo[q], hi[q], 0x31);
    }
}

/* Where lane v's word is in ga_group.idx: unpacking two vectors of sixteen words swaps the
 * middle quarters. */
#define GA_IDX_AT(v) ((v) < 4 || (v) >= 12 ? (v) : (v) ^ 12)

/* One entry of the recurrence for the sixteen lanes. has_up: read the arrivals upstream (else
 * every entry is ready at 0); send: write this stage's arrivals; masked: some rows have
 * ended before this entry. */
__attribute__((target("avx2"))) static inline __attribute__((always_inline)) void
chain_entry(const uint32_t *restrict w, const double *restrict tc, const double *restrict ua,
            double *restrict ao, __m256d F[4], __m256d A[4], const __m256i n64[4], int j,
            int has_up, int send, int masked)
{
    __m256i jv = _mm256_set1_epi64x(j);
#pragma GCC unroll 4 /* every lane's place in w, a constant */
    for (int h = 0; h < 4; h++) {
        int v = 4 * h;
#define GA_TC(l) _mm_loadu_pd(tc + (w[GA_IDX_AT(v + (l))] & 0xFFFF))
#define GA_R(l) ua[(w[GA_IDX_AT(v + (l))] >> 16) + v + (l)]
        /* (t, c) of lanes v, v+2 and v+1, v+3: unpacking gives all four t, all four c */
        __m256d p0 = _mm256_insertf128_pd(_mm256_castpd128_pd256(GA_TC(0)), GA_TC(2), 1);
        __m256d p1 = _mm256_insertf128_pd(_mm256_castpd128_pd256(GA_TC(1)), GA_TC(3), 1);
        __m256d R =
            has_up ? _mm256_setr_pd(GA_R(0), GA_R(1), GA_R(2), GA_R(3)) : _mm256_setzero_pd();
#undef GA_TC
#undef GA_R
        /* vmaxpd(F, R) is F > R ? F : R, the scalar evaluator's expression */
        __m256d f = _mm256_add_pd(_mm256_max_pd(F[h], R), _mm256_unpacklo_pd(p0, p1));
        if (masked)
            f = _mm256_blendv_pd(F[h], f, _mm256_castsi256_pd(_mm256_cmpgt_epi64(n64[h], jv)));
        F[h] = f;
        if (send) {
            A[h] = _mm256_add_pd(_mm256_max_pd(A[h], f), _mm256_unpackhi_pd(p0, p1));
            _mm256_storeu_pd(ao + j * GA_LANES + v, A[h]);
        }
    }
}

/* Step 2 for one stage of the group: start (GA_LANES) the lanes' earliest start, last
 * (GA_LANES) receives their last end. */
__attribute__((target("avx2"))) static inline __attribute__((always_inline)) void
chain_avx2(ga_group *g, const double *tc, int up, const double *start, double *last, int least,
           int most, int has_up, int send)
{
    const double *restrict ua = &g->arr[up][0][0];
    double *restrict ao = &g->arr[!up][0][0];
    __m256d F[4], A[4];
    __m256i n64[4];
    for (int h = 0; h < 4; h++) {
        F[h] = _mm256_loadu_pd(start + 4 * h);
        A[h] = _mm256_setzero_pd();
        n64[h] = _mm256_cvtepi16_epi64(_mm_loadl_epi64((const __m128i *)(g->cnt + 4 * h)));
    }
    int j = 0;
    for (; j < least; j++)
        chain_entry(g->idx[j], tc, ua, ao, F, A, n64, j, has_up, send, 0);
    for (; j < most; j++)
        chain_entry(g->idx[j], tc, ua, ao, F, A, n64, j, has_up, send, 1);
    for (int h = 0; h < 4; h++)
        _mm256_storeu_pd(last + 4 * h, F[h]);
}

/* One stage of the group. */
typedef struct ga_stage {
    const int *rows[GA_LANES]; /* each lane's row */
    int K, up;                 /* up: which half of cum and arr holds the stage upstream */
    int first;                 /* nothing upstream: every entry is ready at 0 */
    int send;                  /* the arrivals downstream are read (not the last stage) */
    int cap, capped;           /* capped: some size could exceed cap */
    int widen;                 /* some prefix sum could reach GA_CUM_MAX */
    const double *tc;          /* (W, 2) */
    const double *start;       /* (GA_LANES) */
    double *last;              /* (GA_LANES) */
} ga_stage;

__attribute__((target("avx2"))) static void stage_avx2(ga_group *g, const ga_stage *st)
{
    const int K = st->K, up = st->up, first = st->first, capped = st->capped;
    const int widen = st->widen;
    const int16_t *U = &g->cum[up][0][0];
    int16_t *Uo = &g->cum[!up][0][0];
    const __m256i zero = _mm256_setzero_si256(), top = _mm256_set1_epi16(GA_CUM_MAX);
    int16_t cap16 = (int16_t)(st->cap < 0 ? 0 : st->cap < GA_CUM_MAX ? st->cap : GA_CUM_MAX);
    const __m256i capv = _mm256_set1_epi16(cap16);
    /* g->cnt still holds the counts upstream: when they differ much, the wait counts below
     * would stop at a different place for every entry (a mispredicted branch each), so such
     * groups compare with every upstream end instead, a loop of the same length each time */
    int uend = 0, umin = GA_KP;
    for (int v = 0; v < GA_LANES && !first; v++) {
        uend = g->cnt[v] > uend ? g->cnt[v] : uend;
        umin = g->cnt[v] < umin ? g->cnt[v] : umin;
    }
    const int ragged = uend - umin > 2;
    uend -= 1; /* no lane counts its row's last end */
    __m256i live = _mm256_set1_epi16(-1), C = zero, Cprev = zero, n = zero, ov = zero, wv = zero;
    int mlo = 0, j = 0;
    for (int j0 = 0; j0 < K; j0 += 16) {
        if (j0 > 0) { /* another block only if some row goes on */
            unsigned on = (unsigned)_mm256_movemask_epi8(live), more = 0;
            for (int v = 0; v < GA_LANES; v++)
                more |= (unsigned)(st->rows[v][j0] > 0) & (on >> (2 * v));
            if (!more)
                break;
        }
        /* entries j0..j0+15 of every row (reading past a short row is harmless: the batch's
         * storage goes on, and those entries are not live) */
        __m256i x[16];
        for (int v = 0; v < GA_LANES; v++)
            x[v] = _mm256_packs_epi32(_mm256_loadu_si256((const __m256i *)(st->rows[v] + j0)),
                                      _mm256_loadu_si256((const __m256i *)(st->rows[v] + j0 + 8)));
        transpose16(x, 1);
        int je = j0 + 16 < K ? j0 + 16 : K;
        for (; j < je; j++) {
            __m256i xj = x[j - j0];
            live = _mm256_and_si256(live, _mm256_cmpgt_epi16(xj, zero));
            if (j > 0) /* the previous entry's sum, unless it was its row's last */
                _mm256_storeu_si256((__m256i *)(Uo + (j - 1) * GA_LANES),
                                    _mm256_blendv_epi8(top, Cprev, live));
            if (_mm256_movemask_epi8(live) == 0)
                goto ended;
            /* saturating adds of non-negative sizes give min(sum, 32767) */
            C = _mm256_adds_epi16(C, xj);
            n = _mm256_sub_epi16(n, live);
            if (capped) /* max(x - cap, 0) on live entries */
                ov = _mm256_adds_epu16(ov, _mm256_and_si256(live, _mm256_subs_epu16(xj, capv)));
            if (widen)
                wv = _mm256_or_si256(wv, _mm256_and_si256(live, _mm256_cmpeq_epi16(C, top)));
            __m256i k = zero;
            if (!first && !ragged) {
                /* every lane counts at least mlo ends: count on from there while all lanes
                 * do (that raises mlo), then while any does; the rows end in 32767 */
                const int16_t *u = U + mlo * GA_LANES;
                k = _mm256_set1_epi16((int16_t)mlo);
                __m256i below = _mm256_cmpgt_epi16(C, _mm256_loadu_si256((const __m256i *)u));
                unsigned mask = (unsigned)_mm256_movemask_epi8(below);
                while (mask == 0xFFFFFFFFu) {
                    k = _mm256_sub_epi16(k, below);
                    u += GA_LANES;
                    mlo++;
                    below = _mm256_cmpgt_epi16(C, _mm256_loadu_si256((const __m256i *)u));
                    mask = (unsigned)_mm256_movemask_epi8(below);
                }
                while (mask) {
                    k = _mm256_sub_epi16(k, below);
                    u += GA_LANES;
                    below = _mm256_cmpgt_epi16(C, _mm256_loadu_si256((const __m256i *)u));
                    mask = (unsigned)_mm256_movemask_epi8(below);
                }
            } else if (!first) {
                /* two sums, so that the subtractions are two chains, not one */
                const __m256i *u = (const __m256i *)U;
                __m256i k1 = zero;
                int m = 0;
                for (; m + 1 < uend; m += 2) {
                    k = _mm256_sub_epi16(k, _mm256_cmpgt_epi16(C, _mm256_loadu_si256(u + m)));
                    k1 = _mm256_sub_epi16(k1, _mm256_cmpgt_epi16(C, _mm256_loadu_si256(u + m + 1)));
                }
                if (m < uend)
                    k = _mm256_sub_epi16(k, _mm256_cmpgt_epi16(C, _mm256_loadu_si256(u + m)));
                k = _mm256_add_epi16(k, k1);
            }
            /* the table index 2x in the low half of each word, the arrival's 16k above */
            __m256i xi = _mm256_add_epi16(xj, xj), ki = _mm256_slli_epi16(k, 4);
            _mm256_storeu_si256((__m256i *)g->idx[j], _mm256_unpacklo_epi16(xi, ki));
            _mm256_storeu_si256((__m256i *)(g->idx[j] + 8), _mm256_unpackhi_epi16(xi, ki));
            Cprev = C;
        }
    }
    /* the longest row filled all K entries */
    _mm256_storeu_si256((__m256i *)(Uo + (j - 1) * GA_LANES), top);
ended:
    if (j == 0) /* every row empty (outside the contract): the sums still end */
        _mm256_storeu_si256((__m256i *)Uo, top);
    _mm256_storeu_si256((__m256i *)g->cnt, n);
    _mm256_storeu_si256((__m256i *)g->over, _mm256_cvtepu16_epi32(_mm256_castsi256_si128(ov)));
    _mm256_storeu_si256((__m256i *)(g->over + 8),
                        _mm256_cvtepu16_epi32(_mm256_extracti128_si256(ov, 1)));
    _mm256_storeu_si256((__m256i *)g->wide, wv);
    int least = GA_KP, most = 0;
    for (int v = 0; v < GA_LANES; v++) {
        least = g->cnt[v] < least ? g->cnt[v] : least;
        most = g->cnt[v] > most ? g->cnt[v] : most;
    }
    /* the first stage has no arrivals to read, the last none to send */
    if (first)
        chain_avx2(g, st->tc, up, st->start, st->last, least, most, 0, st->send);
    else if (st->send)
        chain_avx2(g, st->tc, up, st->start, st->last, least, most, 1, 1);
    else
        chain_avx2(g, st->tc, up, st->start, st->last, least, most, 1, 0);
}

static void eval_avx2(const plan_ga_problem *p, plan_ga_batch *b, int n, double *times_s)
{
    enum { V = GA_LANES };
    int S = b->S, K = b->K, W = b->W;
    size_t row = (size_t)S * K;
    /* the tables, interleaved; stage 0 sends nothing back (its transfers are never read) */
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < S; i++) {
            double *o = b->tc + ((size_t)d * S + i) * 2 * W;
            const double *t = (d == 0 ? p->fwd_s : p->bwd_s) + (size_t)i * W;
            const double *c = p->comm_s + (size_t)(d == 0 ? i : i > 0 ? i - 1 : 0) * W;
            for (int x = 0; x < W; x++) {
                o[2 * x] = t[x];
                o[2 * x + 1] = c[x];
            }
        }
    /* the individuals by their first row's entry count (a stable counting sort): a group runs
     * to its longest row, and rows alike on one stage tend to be alike on the next */
    int at[GA_MAX_K + 2] = {0};
    for (int q = 0; q < n; q++) {
        const int *r = plan_ga_batch_individual(b, q);
        int c = 0;
        while (c < K && r[c] > 0)
            c++;
        b->key[q] = c;
        at[c + 1]++;
    }
    for (int k = 1; k <= K; k++)
        at[k] += at[k - 1];
    for (int q = 0; q < n; q++)
        b->order[at[b->key[q]]++] = q;
    /* a prefix sum can reach GA_CUM_MAX only if the sizes allow it */
    const int widen = (int64_t)K * p->batch >= GA_CUM_MAX;
    static const double zero[V];
    ga_group *g = b->grp;
    for (int q0 = 0; q0 < n; q0 += V) {
        const int *base[V];
        for (int v = 0; v < V; v++) /* a short last group repeats its first individual */
            base[v] = plan_ga_batch_individual(b, b->order[q0 + v < n ? q0 + v : q0]);
        int64_t over[V] = {0};
        int wide[V] = {0}, up = 0;
        double endmax[V] = {0}, last[V];
        ga_stage st = {.K = K, .widen = widen};
        for (int s = 0; s < 2 * S; s++) {
            int d = s >= S, i = d ? 2 * S - 1 - s : s;
            for (int v = 0; v < V; v++)
                st.rows[v] = base[v] + (size_t)d * row + (size_t)i * K;
            st.up = up;
            st.first = s == 0 || s == S;
            st.send = d ? i > 0 : i < S - 1;
            st.cap = p->max_size[i];
            st.capped = st.cap < p->batch;
            st.tc = b->tc + ((size_t)d * S + i) * 2 * W;
            st.start = d ? b->gfend + (size_t)i * V : zero;
            st.last = d ? last : b->gfend + (size_t)i * V;
            stage_avx2(g, &st);
            for (int v = 0; v < V; v++) {
                over[v] += g->over[v];
                wide[v] |= g->wide[v] != 0;
                if (d)
                    endmax[v] = last[v] > endmax[v] ? last[v] : endmax[v];
            }
            up = !up;
        }
        for (int v = 0; v < V && q0 + v < n; v++)
            times_s[b->order[q0 + v]] =
                wide[v] ? plan_ga_eval_one(p, base[v], base[v] + row)
                        : (endmax[v] + p->opt_s) *
                              (over[v] > 0 ? 2.0 + (double)over[v] / p->batch : 1.0);
    }
}
#endif

void plan_ga_eval_batch(const plan_ga_problem *p, plan_ga_batch *b, int n, double *times_s)
{
    /* below a negative cap even a row's unused slots (zeros) count as over it, which only the
     * scalar evaluator counts; the search never sets one */
    for (int i = 0; i < b->S; i++)
        if (p->max_size[i] < 0) {
            size_t row = (size_t)b->S * (size_t)b->K;
            for (int q = 0; q < n; q++) {
                const int *x = plan_ga_batch_individual(b, q);
                times_s[q] = plan_ga_eval_one(p, x, x + row);
            }
            return;
        }
#if GA_HAVE_AVX2
    if (b->kernel == PLAN_GA_KERNEL_AVX2) {
        eval_avx2(p, b, n, times_s);
        return;
    }
#endif
    eval_portable(p, b, n, times_s);
}
