/*
 * bias.c -- attention biases that depend only on the distance
 * d = j - (q_offset + i) from query i to key j: ALiBi (Press et al.), T5's
 * bucketed relative biases (Raffel et al.) and the clipped relative
 * positions of Shaw et al., and any bias whose float64 values per head and
 * distance are given (KERPLE and Sandwich, made by posenc/functional_bias.py).
 *
 * Such a (heads, q, k) bias is a Toeplitz matrix per head: row i is the
 * slice [q-1-i, q-1-i+k) of one vector holding the q+k-1 values the head
 * takes.  So every kernel here first makes those vectors, in the output's
 * element type (rounded once, from float64, exactly as the element itself
 * would be), and then each row is a copy of a slice (a fill) or the add of
 * a slice into a row of attention scores (the fused add).  The vectors are
 * heads * (q+k-1) elements, small enough to stay in L1/L2, so the rows run
 * at the speed of memory: a fill costs the stores of its output, the fused
 * add one read and one write of the scores, and no (heads, q, k) bias is
 * ever materialised next to the scores.  A single query (a decoding step)
 * has one row per head, which is its vector: it is written in place.  T5's
 * bucket is constant over long runs of distances, so its vectors are
 * filled run by run rather than gathered element by element.
 *
 * Large fills use non-temporal stores on the AVX2 path (bias_avx2.c, which
 * also makes ALiBi's vectors and adds rows four or eight elements at a
 * time): the output is far larger than the caches and this kernel never
 * reads it back, so skipping the read-for-ownership of each line saves up
 * to half of the traffic.
 * Adds into float16 or bfloat16 scores widen to float32, add, and round
 * once, which is the correctly rounded sum (float32 has more than 2 * 11 +
 * 2 bits), so both paths agree with NumPy's float16 add and ml_dtypes'
 * bfloat16 add.
 *
 * T5's bucket of a distance is decided in exact arithmetic: the distances
 * where the logarithmic buckets step are computed once per configuration
 * on the Python side (posenc/_t5.py) and passed in, and a distance's bucket
 * counts the thresholds at or below it (a binary search; distances past
 * the last threshold, most of a long cache, need none).
 *
 * T5's backward pass, the gradient of the loss with respect to the table,
 * is the transpose: every element of the incoming gradient added into the
 * table entry its distance's bucket read.  The bucket depends only on the
 * diagonal j - i, so each head's rows are first summed along its q+k-1
 * diagonals (one read of the gradient: a tile of rows at a time, eight
 * diagonals of it summed in registers from shifted loads of its rows, the
 * diagonal sums read and written once per tile; as memory-bound as the
 * forward add), and the diagonal sums then into their buckets, run by run.
 * Each head is one thread's, summed in a fixed order (struct pe_diagonals;
 * diagonals in the order of t), so the bits depend neither on the thread
 * count nor on the SIMD path; no atomics.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bias.h"
#include "pe.h"
#include "simd.h"

/* ---- rows: copy or add a slice of the per-head vector ---- */

PE_INLINE void rows_scalar(const struct pe_toeplitz *t, ptrdiff_t r0, ptrdiff_t r1, const int op,
                           const int dtype)
{
    pe_toeplitz_rows(t, r0, r1, pe_row_add, op, dtype);
}

PE_SPECIALISE(const pe_bias_rows_fn, pe_bias_rows_scalar, rows_scalar,
              (const struct pe_toeplitz *t, ptrdiff_t r0, ptrdiff_t r1), (t, r0, r1));

/* Every row of dst from the per-head vectors vals (struct pe_toeplitz), in
 * chunks of rows shared among the threads. */
static void toeplitz_rows(const struct pe_kernels *k, const struct pe_bias_dst *d, const char *vals,
                          ptrdiff_t vlen, int add, int nthreads)
{
    size_t isz = pe_itemsize(d->dtype);
    ptrdiff_t klen = d->k_len, nrows = d->batch * d->heads * d->q_len;
    struct pe_toeplitz t = {d, vals, vlen,
                            !add && (size_t)nrows * (size_t)klen * isz >= (size_t)PE_STREAM_BYTES};
    /* a write copies bytes: int64 rows (relative positions) go as float64's */
    int dtype = d->dtype == PE_BIAS_I64 ? PE_F64 : d->dtype;
    pe_bias_rows_fn rows = k->bias_rows[add ? PE_BIAS_ADD : PE_BIAS_WRITE][dtype];
    /* chunks of ~64 KiB handed out as threads ask: on a busy machine a
     * thread that loses its core for a while leaves its share to the others */
    ptrdiff_t chunk = (ptrdiff_t)(((size_t)64 << 10) / ((size_t)klen * isz + 1)) + 1;
    ptrdiff_t nchunks = (nrows + chunk - 1) / chunk;
#pragma omp parallel num_threads(pe_team(nthreads, nrows > 1 ? nrows * klen : 0))
    {
#pragma omp for schedule(dynamic, 1)
        for (ptrdiff_t c = 0; c < nchunks; ++c) {
            ptrdiff_t r0 = c * chunk;
            rows(&t, r0, nrows - r0 < chunk ? nrows : r0 + chunk);
        }
        /* streamed stores are weakly ordered: make them visible before the
         * team's barrier hands the array back */
        if (t.stream)
            k->store_fence();
    }
}

/* Distance j - (q_offset + i) at vector index t = q_len - 1 - i + j. */
static inline int64_t distance_at(ptrdiff_t t, ptrdiff_t q_len, int64_t q_offset)
{
    return (int64_t)t - (int64_t)(q_len - 1) - q_offset;
}

/* Writes elements [t0, t1) of head h's vector, which starts at o. */
typedef void (*vector_block_fn)(const void *ctx, char *o, int dtype, ptrdiff_t h, ptrdiff_t t0,
                                ptrdiff_t t1);

/* A bias from its per-head vectors: block() makes them, in blocks of
 * PE_VECTOR_BLOCK elements shared among the threads (long vectors, as in a
 * decoding step over a long cache, are most of the work), and every row is
 * then a slice of them (toeplitz_rows).  A single query of a single batch
 * (a decoding step) has one row per head, which is its vector: block()
 * writes it there directly.  0, or -1 if memory ran out (nothing written). */
static int bias_from_vectors(const struct pe_kernels *k, const struct pe_bias_dst *dst, int add,
                             int nthreads, vector_block_fn block, const void *ctx)
{
    if (dst->batch == 0)
        return 0;
    ptrdiff_t vlen = dst->q_len + dst->k_len - 1, heads = dst->heads;
    size_t isz = pe_itemsize(dst->dtype);
    int direct = dst->q_len == 1 && dst->batch == 1 && !add;
    char *vals = direct ? dst->data : malloc((size_t)heads * (size_t)vlen * isz);
    ptrdiff_t head_stride = direct ? dst->stride_h : vlen * (ptrdiff_t)isz;
    if (vals == NULL)
        return -1;
    ptrdiff_t nblk = (vlen + PE_VECTOR_BLOCK - 1) / PE_VECTOR_BLOCK;
#pragma omp parallel for schedule(static) num_threads(pe_team(nthreads, (heads * vlen)))
    for (ptrdiff_t task = 0; task < heads * nblk; ++task) {
        ptrdiff_t h = task / nblk, t0 = task % nblk * PE_VECTOR_BLOCK;
        ptrdiff_t t1 = vlen - t0 < PE_VECTOR_BLOCK ? vlen : t0 + PE_VECTOR_BLOCK;
        block(ctx, vals + h * head_stride, dst->dtype, h, t0, t1);
    }
    if (!direct) {
        toeplitz_rows(k, dst, vals, vlen, add, nthreads);
        free(vals);
    }
    return 0;
}

/* ---- ALiBi ---- */

/* Elements [t0, t1) of a head's vector, the distance at t0 being d0.  While
 * distances are far below 2**53 they are exact in float64, so the loop can
 * count in float64. */
PE_INLINE void alibi_scalar(char *o, ptrdiff_t t0, ptrdiff_t t1, int64_t d0, double slope,
                            const int causal, const int dtype)
{
    if (pe_alibi_counts(d0))
        pe_alibi_tail(o, t0, 0, t1 - t0, d0, slope, 1, causal, dtype);
    else
        pe_alibi_tail(o, t0, 0, t1 - t0, d0, slope, 0, causal, dtype);
}

PE_SPECIALISE(const pe_alibi_block_fn, pe_alibi_block_scalar, alibi_scalar,
              (char *o, ptrdiff_t t0, ptrdiff_t t1, int64_t d0, double slope),
              (o, t0, t1, d0, slope));

struct alibi_ctx {
    const double *slopes;
    ptrdiff_t q_len;
    int64_t q_offset;
    pe_alibi_block_fn block; /* the table's, for the causality and dtype */
};

static void alibi_vector_block(const void *ctx, char *o, int dtype, ptrdiff_t h, ptrdiff_t t0,
                               ptrdiff_t t1)
{
    const struct alibi_ctx *c = ctx;
    (void)dtype;
    c->block(o, t0, t1, distance_at(t0, c->q_len, c->q_offset), c->slopes[h]);
}

int pe_alibi(const struct pe_kernels *k, const double *slopes, int causal, int64_t q_offset,
             const struct pe_bias_dst *dst, int add, int nthreads)
{
    struct alibi_ctx c = {slopes, dst->q_len, q_offset, k->alibi_block[causal != 0][dst->dtype]};
    return bias_from_vectors(k, dst, add, nthreads, alibi_vector_block, &c);
}

/* ---- a bias given by its per-head vectors ---- */

static void given_vector_block(const void *ctx, char *o, int dtype, ptrdiff_t h, ptrdiff_t t0,
                               ptrdiff_t t1)
{
    const struct pe_bias_given *c = ctx;
    const double *v = c->values + h * c->vlen;
    for (ptrdiff_t t = t0; t < t1; ++t)
        pe_store(o, t, dtype, v[t]);
}

int pe_bias_given(const struct pe_kernels *k, const struct pe_bias_given *given,
                  const struct pe_bias_dst *dst, int add, int nthreads)
{
    return bias_from_vectors(k, dst, add, nthreads, given_vector_block, given);
}

/* ---- T5 buckets ---- */

/* One direction of T5's buckets: distances below `exact` have a bucket
 * each, a larger one has exact + #{k : thresh[k] <= |d|} (thresh from the
 * caller, non-decreasing, covering every distance it passes). */
struct t5_bucketing {
    int bidirectional;
    int64_t per_dir; /* buckets for one direction */
    int64_t exact;   /* distances below this have a bucket each */
    const int64_t *thresh;
    ptrdiff_t nthresh;
};

static struct t5_bucketing t5_layout(int bidirectional, int64_t num_buckets, const int64_t *thresh,
                                     ptrdiff_t nthresh)
{
    struct t5_bucketing p = {bidirectional, bidirectional ? num_buckets / 2 : num_buckets, 0,
                             thresh, nthresh};
    p.exact = p.per_dir / 2;
    return p;
}

static inline int64_t t5_bucket(const struct t5_bucketing *p, int64_t rel)
{
    /* |rel| in uint64, so that INT64_MIN has one too */
    uint64_t mag = rel < 0 ? 0 - (uint64_t)rel : (uint64_t)rel;
    int64_t base = 0;
    uint64_t a;
    if (p->bidirectional) {
        base = rel > 0 ? p->per_dir : 0;
        a = mag;
    } else {
        a = rel < 0 ? mag : 0;
    }
    if (a < (uint64_t)p->exact)
        return base + (int64_t)a;
    if (p->nthresh == 0 ||
        a >= (uint64_t)p->thresh[p->nthresh - 1]) /* the last bucket: most of a long cache */
        return base + p->exact + p->nthresh;
    ptrdiff_t lo = 0, hi = p->nthresh; /* thresholds at or below a */
    while (lo < hi) {
        ptrdiff_t mid = lo + (hi - lo) / 2;
        if ((uint64_t)p->thresh[mid] <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return base + p->exact + lo;
}

int pe_t5_buckets(const int64_t *rel, ptrdiff_t n, int bidirectional, int64_t num_buckets,
                  const int64_t *thresh, ptrdiff_t nthresh, int64_t *out, int nthreads)
{
    struct t5_bucketing p = t5_layout(bidirectional, num_buckets, thresh, nthresh);
#pragma omp parallel for schedule(static) num_threads(pe_team(nthreads, n))
    for (ptrdiff_t i = 0; i < n; ++i)
        out[i] = t5_bucket(&p, rel[i]);
    return 0;
}

/* Elements [a, b) of o, of type dtype, set to v rounded once. */
static void fill_run(char *o, int dtype, ptrdiff_t a, ptrdiff_t b, double v)
{
    if (dtype == PE_F32) {
        float f = (float)v, *p = (float *)o;
        for (ptrdiff_t t = a; t < b; ++t)
            p[t] = f;
    } else if (dtype == PE_F64) {
        double *p = (double *)o;
        for (ptrdiff_t t = a; t < b; ++t)
            p[t] = v;
    } else {
        uint16_t h = dtype == PE_BF16 ? pe_bf16_from_f64(v) : pe_f16_from_f64(v);
        uint16_t *p = (uint16_t *)o;
        for (ptrdiff_t t = a; t < b; ++t)
            p[t] = h;
    }
}

struct t5_ctx {
    const void *table;
    int table_dtype;
    ptrdiff_t heads, nruns;
    const ptrdiff_t *run_start; /* nruns + 1 entries, the last vlen */
    const int64_t *run_bucket;
};

static void t5_vector_block(const void *ctx, char *o, int dtype, ptrdiff_t h, ptrdiff_t t0,
                            ptrdiff_t t1)
{
    const struct t5_ctx *c = ctx;
    /* the run holding t0: the last start at or before it */
    ptrdiff_t lo = 0, hi = c->nruns - 1;
    while (lo < hi) {
        ptrdiff_t mid = hi - (hi - lo) / 2;
        if (c->run_start[mid] <= t0)
            lo = mid;
        else
            hi = mid - 1;
    }
    for (ptrdiff_t r = lo; r < c->nruns && c->run_start[r] < t1; ++r) {
        ptrdiff_t a = c->run_start[r] > t0 ? c->run_start[r] : t0;
        ptrdiff_t b = c->run_start[r + 1] < t1 ? c->run_start[r + 1] : t1;
        fill_run(o, dtype, a, b,
                 pe_load(c->table, c->run_bucket[r] * c->heads + h, c->table_dtype));
    }
}

/* The runs of equal buckets along the q_len + k_len - 1 distances of a
 * (q_len, k_len) bias: run r covers t in [start[r], start[r + 1]) and reads
 * bucket[r]; start has n + 1 entries, the last vlen. */
struct t5_runs {
    int64_t *bucket;
    ptrdiff_t *start;
    ptrdiff_t n;
};

static void t5_runs_free(struct t5_runs *r)
{
    free(r->bucket);
    free(r->start);
}

/* 0, or -1 if memory ran out (nothing to free then). */
static int t5_runs_make(struct t5_runs *r, int bidirectional, ptrdiff_t num_buckets,
                        const int64_t *thresh, ptrdiff_t nthresh, ptrdiff_t q_len, ptrdiff_t vlen,
                        int64_t q_offset, int nthreads)
{
    struct t5_bucketing p = t5_layout(bidirectional, num_buckets, thresh, nthresh);
    r->bucket = malloc((size_t)vlen * sizeof *r->bucket);
    r->start = malloc(((size_t)vlen + 1) * sizeof *r->start);
    if (r->bucket == NULL || r->start == NULL) {
        t5_runs_free(r);
        return -1;
    }
    /* one bucket per distinct distance; the bucket is constant over long
     * runs of distances (all of those past max_distance, for one), so a
     * head's vector is a fill per run; bucket[] is reused for the runs' */
#pragma omp parallel for schedule(static) num_threads(pe_team(nthreads, vlen))
    for (ptrdiff_t t = 0; t < vlen; ++t)
        r->bucket[t] = t5_bucket(&p, distance_at(t, q_len, q_offset));
    ptrdiff_t n = 0;
    for (ptrdiff_t t = 0; t < vlen; ++t) {
        int64_t b = r->bucket[t];
        if (n == 0 || b != r->bucket[n - 1]) {
            r->start[n] = t;
            r->bucket[n++] = b;
        }
    }
    r->start[n] = vlen;
    r->n = n;
    return 0;
}

int pe_t5_bias(const struct pe_kernels *k, const void *table, int table_dtype,
               ptrdiff_t num_buckets, int bidirectional, const int64_t *thresh, ptrdiff_t nthresh,
               int64_t q_offset, const struct pe_bias_dst *dst, int add, int nthreads)
{
    if (dst->batch == 0)
        return 0;
    struct t5_runs runs;
    if (t5_runs_make(&runs, bidirectional, num_buckets, thresh, nthresh, dst->q_len,
                     dst->q_len + dst->k_len - 1, q_offset, nthreads) < 0)
        return -1;
    struct t5_ctx c = {table, table_dtype, dst->heads, runs.n, runs.start, runs.bucket};
    int rc = bias_from_vectors(k, dst, add, nthreads, t5_vector_block, &c);
    t5_runs_free(&runs);
    return rc;
}

/* ---- T5's backward pass ---- */

/* Every row of head h added into its diagonal sums (struct pe_diagonals). */
PE_INLINE void diagonals_scalar(const struct pe_diagonals *s, ptrdiff_t h, const int acc64,
                                const int dtype)
{
    const struct pe_bias_dst *g = s->g;
    for (ptrdiff_t b = 0; b < g->batch; ++b)
        for (ptrdiff_t i0 = 0; i0 < g->q_len; i0 += PE_DIAG_TILE) {
            struct pe_diag_tile w = pe_diagonal_tile(s, b, h, i0, acc64);
            /* the diagonals every row of the tile reaches: base .. base + k - r */
            ptrdiff_t t = w.base, end = w.base + w.k - w.r + 1;
            pe_diagonal_sums(&w, w.base - w.r + 1, w.base, acc64, dtype);
            for (; t + 8 <= end; t += 8)
                pe_diagonal_block8(&w, t, acc64, dtype);
            pe_diagonal_sums(&w, t, w.base + w.k, acc64, dtype);
        }
}

PE_SPECIALISE(const pe_diagonals_fn, pe_diagonals_scalar, diagonals_scalar,
              (const struct pe_diagonals *s, ptrdiff_t h), (s, h));

/* out[bucket, h] = the sum of head h's diagonal sums over the distances of
 * that bucket, in the order of t, in float64 (acc64) or float32. */
static void diagonals_to_buckets(const struct pe_diagonals *s, const struct t5_runs *runs,
                                 ptrdiff_t h, int acc64, char *out)
{
    ptrdiff_t heads = s->g->heads;
    for (ptrdiff_t r = 0; r < runs->n; ++r) {
        ptrdiff_t idx = runs->bucket[r] * heads + h;
        if (acc64) {
            const double *d = (const double *)s->sums + h * s->vlen;
            double sum = ((double *)out)[idx];
            for (ptrdiff_t t = runs->start[r]; t < runs->start[r + 1]; ++t)
                sum = sum + d[t];
            ((double *)out)[idx] = sum;
        } else {
            const float *d = (const float *)s->sums + h * s->vlen;
            float sum = ((float *)out)[idx];
            for (ptrdiff_t t = runs->start[r]; t < runs->start[r + 1]; ++t)
                sum = sum + d[t];
            ((float *)out)[idx] = sum;
        }
    }
}

int pe_t5_table_grad(const struct pe_kernels *k, const struct pe_bias_dst *grad,
                     ptrdiff_t num_buckets, int bidirectional, const int64_t *thresh,
                     ptrdiff_t nthresh, int64_t q_offset, int acc64, char *out, int nthreads)
{
    ptrdiff_t heads = grad->heads, vlen = grad->q_len + grad->k_len - 1;
    size_t asz = acc64 ? 8 : 4;
    memset(out, 0, (size_t)num_buckets * (size_t)heads * asz);
    if (grad->batch == 0)
        return 0;
    struct t5_runs runs;
    if (t5_runs_make(&runs, bidirectional, num_buckets, thresh, nthresh, grad->q_len, vlen,
                     q_offset, nthreads) < 0)
        return -1;
    char *sums = malloc((size_t)heads * (size_t)vlen * asz);
    if (sums == NULL) {
        t5_runs_free(&runs);
        return -1;
    }
    struct pe_diagonals s = {grad, sums, vlen};
    pe_diagonals_fn rows = k->diagonals[acc64 != 0][grad->dtype];
#pragma omp parallel for schedule(dynamic, 1) num_threads(                                         \
        pe_team(nthreads, heads > 1 ? grad->batch * heads * grad->q_len * grad->k_len : 0))
    for (ptrdiff_t h = 0; h < heads; ++h) {
        memset(sums + (size_t)h * (size_t)vlen * asz, 0, (size_t)vlen * asz);
        rows(&s, h);
        diagonals_to_buckets(&s, &runs, h, acc64, out);
    }
    free(sums);
    t5_runs_free(&runs);
    return 0;
}

/* ---- Shaw et al.'s clipped relative positions ---- */

int pe_relative_positions(const struct pe_kernels *k, int64_t max_distance, int64_t q_offset,
                          const struct pe_bias_dst *dst, int nthreads)
{
    if (dst->batch == 0)
        return 0;
    ptrdiff_t vlen = dst->q_len + dst->k_len - 1;
    int64_t *vals = malloc((size_t)vlen * sizeof *vals);
    if (vals == NULL)
        return -1;
    for (ptrdiff_t t = 0; t < vlen; ++t) {
        int64_t dist = distance_at(t, dst->q_len, q_offset);
        if (max_distance >= 0)
            dist = dist > max_distance ? max_distance : dist < -max_distance ? -max_distance : dist;
        vals[t] = dist;
    }
    toeplitz_rows(k, dst, (const char *)vals, vlen, 0, nthreads);
    free(vals);
    return 0;
}

/* The portable path has no non-temporal stores to order. */
void pe_store_fence_scalar(void) {}
