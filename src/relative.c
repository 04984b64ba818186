/*
 * relative.c -- the relative terms that live inside attention: the gather
 * of products by relative distance into attention scores (Transformer-XL /
 * XLNet's relative shift, TENER's two shifts, DeBERTa's c2p and p2c, Shaw's
 * relative keys), and its transpose, the scatter of attention weights by
 * distance (Shaw's relative values).
 *
 * Each of these terms is a product of queries (or keys) with a small table
 * of relative embeddings, done by BLAS on the Python side into a
 * (rows, width) matrix per head, followed by a gather: score (i, j) takes
 * the column of row i (or of row j) that its distance names.  The shifted
 * or gathered (q, k) matrix that the models' own code materialises is never
 * made here: the gather reads the products where they are and adds them
 * straight into the scores, so the scores are read and written once.
 *
 * The column depends on the distance only, through map[t] for
 * t = q_len - 1 - i + j.  Such a map is made of runs: a run of slope 1 (the
 * relative shift: consecutive keys read consecutive columns, so a row is
 * the add of a contiguous slice), a run of slope 0 (clipped or bucketed
 * distances: the add of one value), a run of slope -1 (a table in the
 * other direction, as TENER's key term reads it), or a run to leave alone
 * (-1).  The runs are found once per call, and a row walks the runs its
 * distances cross; an arbitrary map degrades to runs of one.
 *
 * By key (p2c, TENER's key term) score (i, j) reads row j: consecutive keys
 * read consecutive rows, one element each, a cache line per score if read
 * in the scores' order.  Scores are then walked in tiles of TILE x TILE,
 * each gathered row by row of the products (the tile's queries read a few
 * neighbouring columns of row j) into a small buffer in the scores' layout
 * -- a transpose through L1 -- and added a row of scores at a time.
 *
 * Two terms through one map, one by query and one by key (DeBERTa's c2p
 * and p2c), go in one pass: the walk by key, each score taking the
 * product by query and then the one by key, each add rounded as its own
 * gather rounds it (pe_rel_gather_add's `first`).
 *
 * These are the portable kernels, a task at a time through the kernel
 * table (simd.h); relative_avx2.c has the vector ones, which fall back on
 * these for what they do not cover (float64 by key, int32 overflow).
 * Every path gives every score the same one add of the same product.
 *
 * Into float16 (bfloat16) scores each product is rounded to float16
 * (bfloat16) and added as NumPy (ml_dtypes) adds two such arrays: a
 * float32 sum rounded once, so that `scores=` gives the bits of
 * scores += the term made in that type.
 *
 * The dense terms (Transformer-XL's content bias, TUPE's bias) are no
 * gather: a row of the term (the same one for every query, or its own)
 * is added into a row of scores, the float32 sum rounded once, as NumPy
 * adds a float32 array into float16 scores.
 */
#include <stdlib.h>
#include <string.h>

#include "relative.h"

#define TILE PE_REL_TILE

/* Runs shorter than this are merged into segments the vector path
 * gathers through the map. */
#define SHORT_RUN 16

/* The runs of map (n entries) into runs (room for n + 1, the last a
 * sentinel at n); returns their number. */
static ptrdiff_t find_runs(const int64_t *map, ptrdiff_t n, struct pe_rel_run *runs)
{
    ptrdiff_t nruns = 0, t = 0;
    while (t < n) {
        struct pe_rel_run r = {t, map[t] < 0 ? -1 : map[t], 0};
        ptrdiff_t e = t + 1;
        if (r.base < 0) {
            while (e < n && map[e] < 0)
                ++e;
        } else if (e < n && map[e] >= 0 && map[e] - map[t] >= -1 && map[e] - map[t] <= 1) {
            r.slope = (int)(map[e] - map[t]);
            while (e < n && map[e] >= 0 && map[e] == map[e - 1] + r.slope)
                ++e;
        }
        runs[nruns++] = r;
        t = e;
    }
    runs[nruns].start = n;
    return nruns;
}

/* The runs with neighbouring short ones merged into segments of slope 2, into segs (room for nruns
 * + 1, a sentinel last); returns their number. */
static ptrdiff_t merge_runs(const struct pe_rel_run *runs, ptrdiff_t nruns, struct pe_rel_run *segs)
{
    ptrdiff_t m = 0;
    for (ptrdiff_t r = 0; r < nruns; ++r) {
        struct pe_rel_run x = runs[r];
        if (x.base >= 0 && runs[r + 1].start - x.start < SHORT_RUN) {
            if (m > 0 && segs[m - 1].slope == 2)
                continue;
            x.slope = 2;
        }
        segs[m++] = x;
    }
    segs[m].start = runs[nruns].start;
    return m;
}

/* ---- adds of one segment of a row ---- */

/* o[j] += *s, j < n: one product for a run of clipped distances. */
static void add_value(char *o, const char *s, ptrdiff_t n, int dtype)
{
    if (dtype == PE_F32) {
        float *d = (float *)o, x = *(const float *)s;
        for (ptrdiff_t j = 0; j < n; ++j)
            d[j] = d[j] + x;
    } else if (dtype == PE_F64) {
        double *d = (double *)o, x = *(const double *)s;
        for (ptrdiff_t j = 0; j < n; ++j)
            d[j] = d[j] + x;
    } else {
        for (ptrdiff_t j = 0; j < n; ++j)
            pe_rel_add1(o + 2 * j, s, dtype);
    }
}

/* o[j] += s[j * step], j < n: products read down a column (by key). */
static void add_strided(char *o, const char *s, ptrdiff_t step, ptrdiff_t n, int dtype)
{
    if (dtype == PE_F32) {
        float *d = (float *)o;
        const float *x = (const float *)s;
        for (ptrdiff_t j = 0; j < n; ++j)
            d[j] = d[j] + x[j * step];
    } else if (dtype == PE_F64) {
        double *d = (double *)o;
        const double *x = (const double *)s;
        for (ptrdiff_t j = 0; j < n; ++j)
            d[j] = d[j] + x[j * step];
    } else {
        for (ptrdiff_t j = 0; j < n; ++j)
            pe_rel_add1(o + 2 * j, s + 4 * j * step, dtype);
    }
}

/* ---- the gather ---- */

void pe_rel_row_scalar(const struct pe_rel_gather *g, const struct pe_rel_src *s, ptrdiff_t b,
                       ptrdiff_t h, ptrdiff_t i, ptrdiff_t j0, ptrdiff_t j1)
{
    const struct pe_bias_dst *d = g->dst;
    char *row = d->data + b * d->stride_b + h * d->stride_h + i * d->stride_q;
    const char *prod = s->data + (s->batch == 1 ? 0 : b) * s->stride_b + h * s->stride_h;
    ptrdiff_t t0 = d->q_len - 1 - i; /* t of key 0 */
    ptrdiff_t ssz = (ptrdiff_t)g->ssz, isz = (ptrdiff_t)g->isz;
    for (ptrdiff_t r = pe_rel_run_at(g->runs, g->nruns, t0 + j0); r < g->nruns; ++r) {
        const struct pe_rel_run *run = &g->runs[r];
        ptrdiff_t a = run->start > t0 + j0 ? run->start : t0 + j0;
        ptrdiff_t e = run[1].start < t0 + j1 ? run[1].start : t0 + j1;
        if (a >= t0 + j1)
            break;
        if (run->base < 0)
            continue;
        ptrdiff_t col = (ptrdiff_t)run->base + run->slope * (a - run->start), n = e - a;
        char *o = row + (a - t0) * isz;
        if (!s->by_key) {
            const char *p = prod + i * s->stride_r + col * ssz;
            if (run->slope == 1)
                pe_row_add(o, p, n, PE_ROW_PRODUCT, d->dtype);
            else if (run->slope == 0)
                add_value(o, p, n, d->dtype);
            else
                add_strided(o, p, -1, n, d->dtype);
        } else {
            /* key j = a - t0 + m reads row j, column col + slope * m */
            const char *p = prod + (a - t0) * s->stride_r + col * ssz;
            add_strided(o, p, s->stride_r / ssz + run->slope, n, d->dtype);
        }
    }
}

/* Rows of products read this far ahead of the one being gathered. */
#define AHEAD 8

/* A hint to fetch the cache lines of row j of the products that queries
 * [i0, i1) read (between the columns of the range's two ends: the maps are
 * monotone; for another map the hint is merely less useful). */
static inline void prefetch_row(const struct pe_rel_gather *g, const char *prod, ptrdiff_t j,
                                ptrdiff_t i0, ptrdiff_t i1)
{
#if PE_HAS_PREFETCH
    ptrdiff_t q = g->dst->q_len;
    int64_t a = g->map[q - 1 - i0 + j], e = g->map[q - i1 + j];
    int64_t lo = a < e ? a : e, hi = a < e ? e : a;
    if (lo < 0 || hi - lo > 64 * 16)
        return;
    const char *row = prod + j * g->src->stride_r;
    for (int64_t c = lo * (int64_t)g->ssz; c <= hi * (int64_t)g->ssz; c += 64)
        PE_PREFETCH(row + c);
    PE_PREFETCH(row + hi * (int64_t)g->ssz);
#else
    (void)g, (void)prod, (void)j, (void)i0, (void)i1;
#endif
}

/* The products of g->first (by query) for keys [j0, j1) of row i of
 * scores (b, h), where every map entry is >= 0, gathered into buf (float64
 * products for float64 scores, else float32). */
static void first_row(const struct pe_rel_gather *g, ptrdiff_t b, ptrdiff_t h, ptrdiff_t i,
                      ptrdiff_t j0, ptrdiff_t j1, void *buf)
{
    const struct pe_rel_src *f = g->first;
    const char *p =
        f->data + (f->batch == 1 ? 0 : b) * f->stride_b + h * f->stride_h + i * f->stride_r;
    const int64_t *m = g->map + (g->dst->q_len - 1 - i);
    if (g->ssz == 8)
        for (ptrdiff_t j = j0; j < j1; ++j)
            ((double *)buf)[j - j0] = ((const double *)p)[m[j]];
    else
        for (ptrdiff_t j = j0; j < j1; ++j)
            ((float *)buf)[j - j0] = ((const float *)p)[m[j]];
}

/* Scores [i0, i1) x [j0, j1) of (b, h), by key: score (i, j) reads row j
 * of the products, so the tile is gathered row by row of the products
 * (reads along a row, a few cache lines per key) into a buffer laid out
 * as the scores are, and added a row of scores at a time.  Every score
 * takes the same one add of the same product as pe_rel_row_scalar gives
 * it; a tile whose distances meet a map entry < 0 goes through that.
 * With g->first, each row of the tile takes its own products of g->first
 * (gathered into a row) and then the tile's, the two adds of
 * pe_rel_row_scalar in turn. */
void pe_rel_tile_scalar(const struct pe_rel_gather *g, ptrdiff_t b, ptrdiff_t h, ptrdiff_t i0,
                        ptrdiff_t i1, ptrdiff_t j0, ptrdiff_t j1)
{
    const struct pe_bias_dst *d = g->dst;
    const struct pe_rel_src *s = g->src;
    ptrdiff_t q = d->q_len, ni = i1 - i0, nj = j1 - j0;
    ptrdiff_t tlo = q - i1 + j0, thi = q - 1 - i0 + j1; /* the tile's t: [tlo, thi) */
    if (g->neg != NULL && g->neg[thi] != g->neg[tlo]) {
        for (ptrdiff_t i = i0; i < i1; ++i) {
            if (g->first != NULL)
                pe_rel_row_scalar(g, g->first, b, h, i, j0, j1);
            pe_rel_row_scalar(g, s, b, h, i, j0, j1);
        }
        return;
    }
    const char *prod = s->data + (s->batch == 1 ? 0 : b) * s->stride_b + h * s->stride_h;
    char *out = d->data + b * d->stride_b + h * d->stride_h;
    if (g->ssz == 8) {
        double buf[TILE * TILE], row[TILE];
        for (ptrdiff_t jj = 0; jj < nj; ++jj) {
            const double *p = (const double *)(prod + (j0 + jj) * s->stride_r);
            const int64_t *m = g->map + (q - 1 - i0 + j0 + jj); /* t of (i0, j) */
            if (j0 + jj + AHEAD < d->k_len)
                prefetch_row(g, prod, j0 + jj + AHEAD, i0, i1);
            for (ptrdiff_t ii = 0; ii < ni; ++ii)
                buf[ii * TILE + jj] = p[m[-ii]];
        }
        for (ptrdiff_t ii = 0; ii < ni; ++ii) {
            char *o = out + (i0 + ii) * d->stride_q + j0 * 8;
            if (g->first != NULL) {
                first_row(g, b, h, i0 + ii, j0, j1, row);
                pe_row_add(o, (const char *)row, nj, PE_ROW_PRODUCT, PE_F64);
            }
            pe_row_add(o, (const char *)(buf + ii * TILE), nj, PE_ROW_PRODUCT, PE_F64);
        }
        return;
    }
    float buf[TILE * TILE], row[TILE];
    for (ptrdiff_t jj = 0; jj < nj; ++jj) {
        const float *p = (const float *)(prod + (j0 + jj) * s->stride_r);
        const int64_t *m = g->map + (q - 1 - i0 + j0 + jj);
        if (j0 + jj + AHEAD < d->k_len)
            prefetch_row(g, prod, j0 + jj + AHEAD, i0, i1);
        for (ptrdiff_t ii = 0; ii < ni; ++ii)
            buf[ii * TILE + jj] = p[m[-ii]];
    }
    for (ptrdiff_t ii = 0; ii < ni; ++ii) {
        char *o = out + (i0 + ii) * d->stride_q + j0 * (ptrdiff_t)g->isz;
        if (g->first != NULL) {
            first_row(g, b, h, i0 + ii, j0, j1, row);
            pe_row_add(o, (const char *)row, nj, PE_ROW_PRODUCT, d->dtype);
        }
        pe_row_add(o, (const char *)(buf + ii * TILE), nj, PE_ROW_PRODUCT, d->dtype);
    }
}

/* The portable task: a row by query, a row of tiles by key. */
PE_INLINE void task_scalar(const struct pe_rel_gather *g, ptrdiff_t task, const int by_key,
                           const int dtype)
{
    const struct pe_bias_dst *d = g->dst;
    (void)dtype;
    if (!by_key) {
        ptrdiff_t q = d->q_len, p = task / q;
        if (g->prefetch)
            pe_rel_prefetch_row(g, task + 2);
        pe_rel_row_scalar(g, g->src, p / d->heads, p % d->heads, task % q, 0, d->k_len);
        return;
    }
    ptrdiff_t p = task / g->tiles_q, i0 = task % g->tiles_q * TILE;
    ptrdiff_t i1 = d->q_len - i0 < TILE ? d->q_len : i0 + TILE;
    for (ptrdiff_t c = 0; c < g->tiles_k; ++c) {
        ptrdiff_t j0 = c * TILE, j1 = d->k_len - j0 < TILE ? d->k_len : j0 + TILE;
        pe_rel_tile_scalar(g, p / d->heads, p % d->heads, i0, i1, j0, j1);
    }
}

PE_SPECIALISE(const pe_rel_task_fn, pe_rel_task_scalar, task_scalar,
              (const struct pe_rel_gather *g, ptrdiff_t task), (g, task));

size_t pe_rel_gather_scratch(ptrdiff_t n)
{
    size_t m = (size_t)n + 1;
    return 2 * m * sizeof(struct pe_rel_run) + m * sizeof(ptrdiff_t) + 2 * m * sizeof(int32_t) + m +
           8 * m;
}

int pe_rel_gather_add(const struct pe_kernels *k, const struct pe_rel_src *src,
                      const struct pe_rel_src *first, const int64_t *map,
                      const struct pe_bias_dst *dst, int nthreads, void *scratch)
{
    if (dst->batch == 0)
        return 0;
    ptrdiff_t n = dst->q_len + dst->k_len - 1;
    void *own = scratch == NULL ? malloc(pe_rel_gather_scratch(n)) : NULL;
    char *at = scratch != NULL ? scratch : own;
    if (at == NULL)
        return -1;
    /* runs (twice: as found and merged), neg, map32, wmin, block, perm */
    struct pe_rel_run *runs = (struct pe_rel_run *)at;
    at += 2 * ((size_t)n + 1) * sizeof *runs;
    ptrdiff_t *neg = NULL, *negs = (ptrdiff_t *)at;
    at += ((size_t)n + 1) * sizeof *neg;
    int32_t *map32 = (int32_t *)at, *wmin = map32 + n + 1;
    int8_t *block = NULL, *blocks = (int8_t *)(wmin + n + 1);
    uint8_t *perm = (uint8_t *)(blocks + n + 1);
    ptrdiff_t nruns = find_runs(map, n, runs);
    ptrdiff_t tq = (dst->q_len + TILE - 1) / TILE, tk = (dst->k_len + TILE - 1) / TILE;
    struct pe_rel_gather g = {src,
                              first,
                              dst,
                              runs,
                              nruns,
                              runs + nruns + 1,
                              merge_runs(runs, nruns, runs + nruns + 1),
                              pe_itemsize(dst->dtype),
                              dst->dtype == PE_F64 ? 8 : 4,
                              map,
                              map32,
                              NULL,
                              tq,
                              tk,
                              NULL,
                              NULL,
                              NULL,
                              0};
    /* the map's entries are < width; the vector path indexes with int32 */
    if (src->width <= INT32_MAX) {
        for (ptrdiff_t t = 0; t < n; ++t)
            map32[t] = (int32_t)map[t];
    } else {
        g.map32 = NULL;
    }
    /* by key, where the map has entries < 0 (a run of them) */
    for (ptrdiff_t r = 0; r < nruns && src->by_key && neg == NULL; ++r) {
        if (runs[r].base < 0) {
            neg = negs;
            neg[0] = 0;
            for (ptrdiff_t u = 0; u < n; ++u)
                neg[u + 1] = neg[u] + (map[u] < 0);
        }
    }
    g.neg = neg;
    /* the lanes of eight entries within one run of slope -1, 0, 1 */
    static const uint8_t lanes[3][8] = {
        {7, 6, 5, 4, 3, 2, 1, 0}, {0, 0, 0, 0, 0, 0, 0, 0}, {0, 1, 2, 3, 4, 5, 6, 7}};
    /* wmin: eight entries within one run have its ends for least and
     * greatest (and lie within 8 of each other), so only the windows that
     * cross the end of a run are looked at entry by entry */
    const int64_t width = g.map32 != NULL ? src->width : 0; /* 0: no window is loaded */
    for (ptrdiff_t r = 0; r < nruns; ++r) {
        ptrdiff_t s0 = runs[r].start, e = runs[r + 1].start < n - 7 ? runs[r + 1].start : n - 7;
        ptrdiff_t inner = runs[r + 1].start - 7 < e ? runs[r + 1].start - 7 : e;
        int64_t base = runs[r].base;
        int slope = runs[r].slope;
        ptrdiff_t t = s0;
        if (base < 0) {
            for (; t < e; ++t)
                wmin[t] = -1;
            continue;
        }
        for (; t < inner; ++t) {
            int64_t lo = base + slope * (t - s0) - (slope < 0 ? 7 : 0);
            wmin[t] = lo + 8 <= width ? (int32_t)lo : -1;
            memcpy(perm + 8 * t, lanes[slope + 1], 8);
        }
        for (; t < e; ++t) {
            int64_t lo = map[t], hi = map[t];
            for (int l = 1; l < 8; ++l) {
                lo = map[t + l] < lo ? map[t + l] : lo;
                hi = map[t + l] > hi ? map[t + l] : hi;
            }
            wmin[t] = lo >= 0 && hi - lo < 8 && lo + 8 <= width ? (int32_t)lo : -1;
            if (wmin[t] >= 0)
                for (int l = 0; l < 8; ++l)
                    perm[8 * t + l] = (uint8_t)(map[t + l] - lo);
        }
    }
    g.wmin = wmin;
    g.perm = perm;
    /* whether any entry >= 0 is less than the last one >= 0 before it */
    for (ptrdiff_t r = 0, last = -1; r < nruns && !g.prefetch; ++r) {
        if (runs[r].base < 0)
            continue;
        ptrdiff_t len = runs[r + 1].start - runs[r].start;
        g.prefetch = runs[r].base < last || (runs[r].slope < 0 && len > 1);
        last = runs[r].base + runs[r].slope * (len - 1);
    }
    if (src->by_key && n >= PE_REL_BLOCK) {
        block = blocks;
        ptrdiff_t count = 0; /* entries < 0 among map[t .. t + PE_REL_BLOCK) */
        for (ptrdiff_t t = 0; t < PE_REL_BLOCK; ++t)
            count += map[t] < 0;
        for (ptrdiff_t t = 0; t + PE_REL_BLOCK <= n; ++t) {
            block[t] = (int8_t)(count ? 3 : 2);
            if (t + PE_REL_BLOCK < n)
                count += (map[t + PE_REL_BLOCK] < 0) - (map[t] < 0);
        }
        for (ptrdiff_t r = 0; r < nruns; ++r)
            if (runs[r].base >= 0)
                for (ptrdiff_t t = runs[r].start; t + PE_REL_BLOCK <= runs[r + 1].start; ++t)
                    block[t] = (int8_t)runs[r].slope;
        for (ptrdiff_t t = 0; t + PE_REL_BLOCK <= n; ++t) {
            int all = block[t] == 2;
            for (int l = 0; l < 8 && all; ++l)
                all = wmin[t + l] >= 0;
            if (all)
                block[t] = 4;
        }
        g.block = block;
    }
    ptrdiff_t bh = dst->batch * dst->heads;
    ptrdiff_t ntasks = src->by_key ? bh * tq : bh * dst->q_len;
    pe_rel_task_fn fn = k->rel_task[src->by_key ? 1 : 0][dst->dtype];
    /* by query a task is a row: the products of a row are one short vector */
#pragma omp parallel for schedule(static)                                                          \
    num_threads(pe_team(nthreads, bh * dst->q_len * dst->k_len))
    for (ptrdiff_t task = 0; task < ntasks; ++task)
        fn(&g, task);
    free(own);
    return 0;
}

/* ---- dense terms ---- */

void pe_rel_dense_add(const struct pe_kernels *k, const struct pe_rel_src *src,
                      const struct pe_bias_dst *dst, int store, int nthreads)
{
    ptrdiff_t q = dst->q_len, rows = dst->batch * dst->heads * q;
    pe_row_add_fn fn = k->row_add[store ? PE_ROW_CAST : PE_ROW_SUM][dst->dtype];
#pragma omp parallel for schedule(static) num_threads(pe_team(nthreads, rows * dst->k_len))
    for (ptrdiff_t r = 0; r < rows; ++r) {
        ptrdiff_t i = r % q, p = r / q, b = p / dst->heads, h = p % dst->heads;
        const char *x = src->data + (src->batch == 1 ? 0 : b) * src->stride_b + h * src->stride_h +
                        (src->rows == 1 ? 0 : i) * src->stride_r;
        fn(dst->data + b * dst->stride_b + h * dst->stride_h + i * dst->stride_q, x, dst->k_len);
    }
}

/* ---- the scatter ---- */

/* The sum of x[0 .. n) in LANES running sums (a power of two, >= 8),
 * folded in halves to eight and added pairwise at the end: no chain of
 * adds each waiting on the last, and vectors where the compiler makes them.
 * Fewer than LANES values are summed in order from zero. */
#define DEFINE_SUM(name, type, LANES)                                                              \
    static type name(const type *x, ptrdiff_t n)                                                   \
    {                                                                                              \
        if (n < LANES) {                                                                           \
            type s = 0;                                                                            \
            for (ptrdiff_t m = 0; m < n; ++m)                                                      \
                s += x[m];                                                                         \
            return s;                                                                              \
        }                                                                                          \
        type a[LANES] = {0};                                                                       \
        ptrdiff_t m = 0;                                                                           \
        for (; m + LANES <= n; m += LANES)                                                         \
            for (int l = 0; l < LANES; ++l)                                                        \
                a[l] += x[m + l];                                                                  \
        for (int w = LANES / 2; w >= 8; w /= 2)                                                    \
            for (int l = 0; l < w; ++l)                                                            \
                a[l] += a[l + w];                                                                  \
        type s = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));                \
        for (; m < n; ++m)                                                                         \
            s += x[m];                                                                             \
        return s;                                                                                  \
    }

DEFINE_SUM(sum_f64, double, 8)
DEFINE_SUM(sum_f32, float, 16)

/* Weight m of a row of weights of type wt (PE_F16, PE_F32 or PE_F64), as a
 * double (exact for each: float32 sums take it back as the float it was). */
PE_INLINE double weight(const char *w, ptrdiff_t m, const int wt)
{
    if (wt == PE_F64)
        return ((const double *)w)[m];
    if (wt == PE_F32)
        return ((const float *)w)[m];
    return pe_f32_from_f16(((const uint16_t *)w)[m]);
}

/* o[m] += w[m] for the sums' type ot: float32 sums add a float32 value. */
PE_INLINE void accumulate(char *o, ptrdiff_t m, const char *w, ptrdiff_t k, const int wt,
                          const int ot)
{
    if (ot == PE_F64) {
        double *x = (double *)o + m;
        *x = *x + weight(w, k, wt);
    } else {
        float *x = (float *)o + m;
        *x = *x + (float)weight(w, k, wt);
    }
}

/* o[slope * m] += w[m] for m in [0, n), slope 1 or -1, for float32 or
 * float64 weights summed in their own type: one add into each sum, as
 * accumulate makes it, in a loop the compiler turns into vectors. */
#define DEFINE_ADD_RUN(name, type)                                                                 \
    static void name(type *o, const type *w, ptrdiff_t n, ptrdiff_t slope)                         \
    {                                                                                              \
        if (slope > 0) {                                                                           \
            for (ptrdiff_t m = 0; m < n; ++m)                                                      \
                o[m] = o[m] + w[m];                                                                \
        } else {                                                                                   \
            type *last = o - (n - 1);                                                              \
            for (ptrdiff_t m = 0; m < n; ++m)                                                      \
                last[n - 1 - m] = last[n - 1 - m] + w[m];                                          \
        }                                                                                          \
    }

DEFINE_ADD_RUN(add_run_f64, double)
DEFINE_ADD_RUN(add_run_f32, float)

/* The scatter's shared description: the map and its runs, and the tasks
 * (by key a block of KEYS keys over every query in order, by query a row). */
struct scatter {
    const struct pe_rel_weights *w;
    const struct pe_rel_sums *out;
    const int64_t *map;
    const struct pe_rel_run *runs; /* by key, the segments (short runs merged, slope 2) */
    ptrdiff_t nruns, blocks;
};

enum { KEYS = 64 };

/* Task `task` of the scatter, for weights of type wt and sums of type ot:
 * row i walks the runs its keys cross (by key, each query in order does so
 * for the task's block of keys).  By query, a run of slope 1 or -1 adds one
 * weight into each of its sums, and a clipped run (slope 0) the sum of its
 * weights (sum_f32, sum_f64; float16 weights one at a time onto the
 * entry).  By key, each weight goes into its key's row, a row further on
 * (and a column on, for a slope of 1 or -1) at each step. */
PE_INLINE void scatter_task(const struct scatter *sc, ptrdiff_t task, const int by_key,
                            const int wt)
{
    const int ot = wt == PE_F64 ? PE_F64 : PE_F32;
    const struct pe_rel_weights *w = sc->w;
    const struct pe_rel_sums *out = sc->out;
    const ptrdiff_t wsz = (ptrdiff_t)pe_itemsize(wt), osz = (ptrdiff_t)pe_itemsize(ot);
    ptrdiff_t q_len = w->q_len, k_len = w->k_len;
    ptrdiff_t p = task / sc->blocks, b = p / w->heads, h = p % w->heads;
    const char *wp = w->data + b * w->stride_b + h * w->stride_h;
    char *op = out->data + b * out->stride_b + h * out->stride_h;
    ptrdiff_t i0 = by_key ? 0 : task % sc->blocks, i1 = by_key ? q_len : i0 + 1;
    ptrdiff_t j0 = by_key ? (task % sc->blocks) * KEYS : 0;
    ptrdiff_t j1 = by_key && j0 + KEYS < k_len ? j0 + KEYS : k_len;
    /* read once into locals: through the pointers, they were read again
     * after each store into out, for every segment of every row */
    const ptrdiff_t stride_q = w->stride_q, stride_r = out->stride_r, nruns = sc->nruns;
    const struct pe_rel_run *runs = sc->runs;
    const int64_t *map = sc->map;
    ptrdiff_t step = stride_r / osz; /* elements from a row of out to the next */
    for (ptrdiff_t i = i0; i < i1; ++i) {
        ptrdiff_t t0 = q_len - 1 - i;
        const char *wrow = wp + i * stride_q;
        for (ptrdiff_t x = pe_rel_run_at(runs, nruns, t0 + j0);
             x < nruns && runs[x].start < t0 + j1; ++x) {
            const struct pe_rel_run *run = &runs[x];
            ptrdiff_t a = run->start > t0 + j0 ? run->start : t0 + j0;
            ptrdiff_t e = run[1].start < t0 + j1 ? run[1].start : t0 + j1, n = e - a;
            if (run->base < 0)
                continue;
            ptrdiff_t col = (ptrdiff_t)run->base + run->slope * (a - run->start);
            const char *src = wrow + (a - t0) * wsz;
            /* by key, key a - t0 on (a row of out further each step); by query, row i */
            char *o = op + (by_key ? a - t0 : i) * stride_r;
            if (by_key && run->slope == 2) { /* short runs: each column from the map */
                const int64_t *cols = map + a;
                for (ptrdiff_t m = 0; m < n; ++m)
                    accumulate(o, step * m + (ptrdiff_t)cols[m], src, m, wt, ot);
            } else if (!by_key && run->slope != 0 && wt != PE_F16) {
                if (wt == PE_F64)
                    add_run_f64((double *)o + col, (const double *)src, n, run->slope);
                else
                    add_run_f32((float *)o + col, (const float *)src, n, run->slope);
            } else if (by_key || run->slope != 0) {
                ptrdiff_t along = (by_key ? step : 0) + run->slope;
                for (ptrdiff_t m = 0; m < n; ++m)
                    accumulate(o, col + along * m, src, m, wt, ot);
            } else if (wt == PE_F64) {
                ((double *)o)[col] += sum_f64((const double *)src, n);
            } else if (wt == PE_F32) {
                ((float *)o)[col] += sum_f32((const float *)src, n);
            } else {
                for (ptrdiff_t m = 0; m < n; ++m)
                    accumulate(o, col, src, m, wt, ot);
            }
        }
    }
}

typedef void (*scatter_fn)(const struct scatter *sc, ptrdiff_t task);

/* [by_key][weights' dtype]; the weights are never bfloat16 (module.c
 * takes float16, float32 and float64), so that entry is never called */
PE_SPECIALISE(static const scatter_fn, scatter_tasks, scatter_task,
              (const struct scatter *sc, ptrdiff_t task), (sc, task));

int pe_rel_scatter_add(const struct pe_rel_weights *w, const int64_t *map,
                       const struct pe_rel_sums *out, int nthreads)
{
    ptrdiff_t q_len = w->q_len, k_len = w->k_len, pairs = w->batch * w->heads;
    ptrdiff_t rows = pairs * (w->by_key ? k_len : q_len);
    if (rows == 0 || q_len == 0)
        return 0;
    ptrdiff_t n = q_len + k_len - 1;
    struct pe_rel_run *runs = malloc(2 * ((size_t)n + 1) * sizeof *runs);
    if (runs == NULL)
        return -1;
    struct scatter sc = {w, out, map, runs, find_runs(map, n, runs), 0};
    if (w->by_key) { /* by key, the runs short ones merged */
        sc.runs = runs + sc.nruns + 1;
        sc.nruns = merge_runs(runs, sc.nruns, runs + sc.nruns + 1);
    }
    sc.blocks = w->by_key ? (k_len + KEYS - 1) / KEYS : q_len;
    scatter_fn fn = scatter_tasks[w->by_key ? 1 : 0][w->dtype];
    ptrdiff_t ntasks = pairs * sc.blocks;
#pragma omp parallel for schedule(static)                                                          \
    num_threads(pe_team(nthreads, rows *(w->by_key ? q_len : k_len)))
    for (ptrdiff_t task = 0; task < ntasks; ++task)
        fn(&sc, task);
    free(runs);
    return 0;
}
