/*
 * relative.h -- the relative terms that live inside attention
 * (Transformer-XL / XLNet, TENER, DeBERTa, Shaw et al.): the gather of a
 * small matrix of products into attention scores by relative distance, and
 * its transpose, the scatter of attention weights by relative distance.
 */
#ifndef PE_RELATIVE_H
#define PE_RELATIVE_H

#include <stddef.h>
#include <stdint.h>

#include "pe.h"
#include "simd.h"

/* A (batch, heads, rows, width) array of products -- a query's or a key's
 * row against every row of a relative table -- of float32 (added into
 * float16 or float32 scores) or float64 (into float64 scores).  rows is
 * q_len (by_key 0: the products of query i) or k_len (by_key 1: those of
 * key j).  Strides in bytes; stride_b is 0 where one batch serves all;
 * the last axis is contiguous. */
struct pe_rel_src {
    const char *data;
    ptrdiff_t batch, rows, width;
    ptrdiff_t stride_b, stride_h, stride_r;
    int by_key;
};

/* The column of the products each distance reads: map[t] for
 * t = q_len - 1 - i + j (q_len + k_len - 1 entries), in [-1, width); -1
 * leaves the score as it is (a key the table does not reach, such as a
 * future key of a causal model). */

/* dst[b, h, i, j] += src[b, h, r, map[q_len - 1 - i + j]] with r = i or j
 * (src->by_key), the product rounded to dst's type and added with one
 * rounding (float16 and bfloat16 through float32, as NumPy adds float16
 * arrays and ml_dtypes bfloat16 ones), on the path of k.  With first (not
 * NULL; src by key, first by query, of src's width): two terms in one pass
 * over the scores (DeBERTa's c2p and p2c), each score taking first's
 * product (row i) and then src's (row j) through the same map, each add as
 * above: the bits of the two gathers one after the other.  0, or -1 if
 * memory ran out (nothing written). */
int pe_rel_gather_add(const struct pe_kernels *k, const struct pe_rel_src *src,
                      const struct pe_rel_src *first, const int64_t *map,
                      const struct pe_bias_dst *dst, int nthreads, void *scratch);

/* The bytes of the scratch memory pe_rel_gather_add needs for a map of n
 * entries: passed in (aligned as malloc aligns), or NULL for its own.  A
 * caller that gathers many blocks keeps one: a fresh allocation of this
 * size each call can cost more than a small block's gather, in the pages
 * the system hands out again. */
size_t pe_rel_gather_scratch(ptrdiff_t n);

/* ---- shared by the two paths of the gather (relative.c, relative_avx2.c) ---- */

/* A run of the map: for t in [start, next run's start), column
 * base + slope * (t - start), slope -1, 0 or 1; base < 0: nothing to add.
 * Among the segments (runs merged for the vector path) slope 2 stands for
 * several short runs together: the column is map[t] itself. */
struct pe_rel_run {
    ptrdiff_t start;
    int64_t base;
    int slope;
};

struct pe_rel_gather {
    const struct pe_rel_src *src;
    /* NULL, or (src by key) the products by query each score takes first */
    const struct pe_rel_src *first;
    const struct pe_bias_dst *dst;
    const struct pe_rel_run *runs; /* the runs of the map, a sentinel at its end */
    ptrdiff_t nruns;
    const struct pe_rel_run *segs; /* the runs, short ones merged (slope 2) */
    ptrdiff_t nsegs;
    size_t isz, ssz;            /* bytes of a score and of a product */
    const int64_t *map;         /* the map itself */
    const int32_t *map32;       /* the map as int32, or NULL: the vector path is the portable one */
    const ptrdiff_t *neg;       /* neg[t]: entries < 0 among map[0 .. t), or NULL: none */
    ptrdiff_t tiles_q, tiles_k; /* by key: the tiles of PE_REL_TILE scores along each axis */
    /* by key: block[t] for the PE_REL_BLOCK map entries from t (t + that
     * <= the map's length): 1, 0 or -1 when one run of that slope holds
     * them all, 2 when they are all >= 0 otherwise, 3 when one is < 0 */
    const int8_t *block;
    /* wmin[t] for the 8 map entries from t (t + 8 <= the map's length):
     * their least when they are all >= 0, lie within 8 columns of it and
     * the 8 from it are inside the products' rows, else -1 (vector path) */
    const int32_t *wmin;
    /* perm[8 t + l] = map[t + l] - wmin[t], l < 8, where wmin[t] >= 0: the
     * lanes of the eight columns loaded from wmin[t] (vector path) */
    const uint8_t *perm;
    /* by query: whether a row's products are worth a hint to fetch them
     * (they are not read in ascending order, which the CPU's own
     * prefetchers follow best) */
    int prefetch;
};

/* The vector path by key adds blocks of 8 x 8 scores, whose distances
 * span 15 entries of the map; block[t] is 4 where it would be 2 but
 * wmin[t + l] >= 0 for each l < 8. */
#define PE_REL_BLOCK 15

/* By key, scores are walked in tiles of PE_REL_TILE x PE_REL_TILE. */
#define PE_REL_TILE 64

/* The run holding t. */
static inline ptrdiff_t pe_rel_run_at(const struct pe_rel_run *runs, ptrdiff_t nruns, ptrdiff_t t)
{
    ptrdiff_t lo = 0, hi = nruns - 1;
    while (lo < hi) {
        ptrdiff_t mid = hi - (hi - lo) / 2;
        if (runs[mid].start <= t)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

#if PE_X86
/* The AVX2 path's row task by query into bfloat16 scores (relative_avx2.c),
 * its runs of slope 1 added by run1: the AVX-512 BF16 path's rows
 * (relative_avx512bf16.c). */
void pe_rel_row_bf16_avx2(const struct pe_rel_gather *g, ptrdiff_t task, pe_row_add_fn run1);
#endif

/* A hint to fetch the line at p (no fault: p need not be valid). */
static inline void pe_rel_prefetch(const void *p)
{
    PE_PREFETCH(p);
}

/* Hints to fetch what row task `task` of the gather by query reads and
 * writes: its scores and the columns of its products that its distances
 * name (between those of its two ends: the maps are monotone; for another
 * map the hint is merely less useful). */
static inline void pe_rel_prefetch_row(const struct pe_rel_gather *g, ptrdiff_t task)
{
    const struct pe_bias_dst *d = g->dst;
    const struct pe_rel_src *s = g->src;
    ptrdiff_t q = d->q_len, k = d->k_len, p = task / q, i = task % q;
    ptrdiff_t b = p / d->heads, h = p % d->heads;
    if (b >= d->batch)
        return;
    int64_t a = g->map[q - 1 - i], e = g->map[q - 2 - i + k];
    int64_t lo = a < e ? a : e, hi = a < e ? e : a;
    if (lo < 0)
        return;
    const char *prod =
        s->data + (s->batch == 1 ? 0 : b) * s->stride_b + h * s->stride_h + i * s->stride_r;
    for (int64_t c = lo * (int64_t)g->ssz; c < (hi + 1) * (int64_t)g->ssz; c += 64)
        pe_rel_prefetch(prod + c);
    pe_rel_prefetch(prod + (hi + 1) * (int64_t)g->ssz - 1);
}

/* *o += *x for one score o of dtype and its product x (float64 for float64
 * scores, else float32): the product rounded to the scores' type first
 * (the term made in that type), then added with one rounding (float16 and
 * bfloat16 summed in float32), as pe_row_add adds a row of products. */
static inline void pe_rel_add1(char *o, const char *x, int dtype)
{
    pe_row_add(o, x, 1, PE_ROW_PRODUCT, dtype);
}

/* The portable gathers, which the vector path falls back on: keys
 * [j0, j1) of row i of scores (b, h) of the products s (g->src, or
 * g->first), and scores [i0, i1) x [j0, j1) by key (g->first's products
 * first where there are). */
void pe_rel_row_scalar(const struct pe_rel_gather *g, const struct pe_rel_src *s, ptrdiff_t b,
                       ptrdiff_t h, ptrdiff_t i, ptrdiff_t j0, ptrdiff_t j1);
void pe_rel_tile_scalar(const struct pe_rel_gather *g, ptrdiff_t b, ptrdiff_t h, ptrdiff_t i0,
                        ptrdiff_t i1, ptrdiff_t j0, ptrdiff_t j1);

/* A dense term added into scores: dst[b, h, i, j] += src[b, h, i, j], src
 * of float32 (float64 for float64 scores), src->rows q_len or 1 (one row
 * for every query), src->batch 1 or dst's (by_key unused); each sum
 * rounded once to the scores' type (the kernels' row_add, PE_ROW_SUM),
 * the same bits on every path and for any thread count.  store: dst = src
 * instead, each value rounded once (PE_ROW_CAST, as pe_cast). */
void pe_rel_dense_add(const struct pe_kernels *k, const struct pe_rel_src *src,
                      const struct pe_bias_dst *dst, int store, int nthreads);

/* Weights to scatter: (batch, heads, q_len, k_len) of PE_F16, PE_F32 or
 * PE_F64, each row of k_len contiguous, rows at the byte strides given. */
struct pe_rel_weights {
    const char *data;
    int dtype;
    ptrdiff_t batch, heads, q_len, k_len;
    ptrdiff_t stride_b, stride_h, stride_q;
    int by_key;
};

/* Sums of a scatter: (batch, heads, rows, width) of PE_F32 or PE_F64, each
 * row contiguous, rows at the byte strides given (a row stride other than a
 * multiple of 4 KiB keeps a scatter by key, which writes a row per step,
 * from rows that share cache sets). */
struct pe_rel_sums {
    char *data;
    int dtype;
    ptrdiff_t width;
    ptrdiff_t stride_b, stride_h, stride_r;
};

/* The transpose of a gather: out[b, h, i, map[t]] += w[b, h, i, j] (by
 * query; out (batch, heads, q_len, width)) or out[b, h, j, map[t]] += w[b,
 * h, i, j] (w->by_key; out (batch, heads, k_len, width)), t = q_len - 1 -
 * i + j, map[t] = -1 left out; out of PE_F64 for PE_F64 weights, else of
 * PE_F32, each entry summed in that type: by key in the order of i, by
 * query in the order of j (a clipped run's float32 or float64 weights, one
 * entry's many, summed apart, in sixteen or eight running sums from 16 or 8
 * of them, and the sum added to the entry); the same bits for any thread
 * count.  0, or -1 if memory ran out (nothing written). */
int pe_rel_scatter_add(const struct pe_rel_weights *w, const int64_t *map,
                       const struct pe_rel_sums *out, int nthreads);

#endif
