/*
 * relative_avx2.c -- the gather of relative.c on the AVX2 path: eight
 * scores at a time (four of float64), each taking the same one add of the
 * same product as the portable path gives it, so the same bits (where a
 * NaN meets a NaN, a NaN: which, the compilers' order of the operands).
 *
 * By query (score (i, j) reads row i of the products at the column of its
 * distance), a row walks the segments of the map its distances cross: a
 * run of slope 1 (Transformer-XL's shift) is an unaligned load of the
 * products at the run's offset, a run of -1 (DeBERTa's c2p) a load
 * reversed, a run of slope 0 (clipped distances) one broadcast value, and
 * several short runs together (log buckets) a load and a permute where
 * eight neighbouring columns lie within 8 of each other (its lanes read
 * from a table made with the map), else a gather through the map (as
 * int32 column indices).  A row whose products are
 * not read in ascending order has them hinted two rows ahead: the CPU's
 * own prefetchers follow ascending reads only.
 *
 * By key (score (i, j) reads row j), the scores are walked in strips of
 * eight rows, each along its keys in blocks of 8 x 8: the eight keys'
 * rows of products give one vector each (a load for runs of slope 1 or
 * -1, a load and a permute for close columns, a gather otherwise), which
 * an in-register transpose turns into the block's eight rows of scores; a
 * run of slope 0 gives one vector of the eight keys' products for all
 * eight rows, read from a copy of that column of the products (two such
 * columns kept per row of tiles).  The lines of scores of the next strip
 * are hinted.
 *
 * With g->first (DeBERTa's c2p before its p2c), each row of a block
 * first takes its own eight products by query (a load and a permute
 * where the eight columns lie within 8, one value for a block of one
 * column, else a gather), then the block's by key, the score held in a
 * register between the two adds (add8x2); the products of both a few
 * blocks ahead are hinted (rows of keys and columns read downwards, which
 * the CPU's prefetchers do not follow).
 *
 * Float16 and bfloat16 scores: the products rounded to the scores' type,
 * widened back, added in float32 and rounded once (F16C for float16, the
 * shifts of avx2.h for bfloat16), as pe_rel_add1 does one score; bfloat16
 * scores sixteen at a time (add16), where the roundings bound the time.
 *
 * Dense terms are rows added whole: the kernels' row_add (row_avx2.c).
 */
#include "pe.h"
#include "relative.h"
#include "simd.h"

#include "avx2.h"

#include <stdlib.h>

#if PE_X86
/* Keys ahead whose products (both terms') the fused pass hints. */
#define AHEAD_KEYS 32
/* o[0 .. 8) += x, their products: each product rounded to the scores'
 * type first (pe_rel_add1). */
PE_INLINE void add8(char *o, __m256 x, const int dtype)
{
    pe_sum8(o, pe_round8(x, dtype), dtype);
}

/* o[0 .. 16) += x0, x1, their products: each product rounded to the
 * scores' type first, as add8 rounds it (for bfloat16 the sixteen with one
 * test for NaNs), then summed (pe_bf16_sum16). */
PE_INLINE void add16(char *o, __m256 x0, __m256 x1, const int dtype)
{
    if (dtype != PE_BF16) {
        add8(o, x0, dtype);
        add8(o + 8 * pe_itemsize(dtype), x1, dtype);
        return;
    }
    const __m256i top = _mm256_set1_epi32((int)0xffff0000u);
    __m256i r0, r1;
    pe_bf16_rounded2(x0, x1, &r0, &r1);
    pe_bf16_sum16(o, _mm256_castsi256_ps(_mm256_and_si256(r0, top)),
                  _mm256_castsi256_ps(_mm256_and_si256(r1, top)), 0);
}

/* o[0 .. 8) += x, then += y: two terms' products, each rounded to the
 * scores' type and added as add8 adds it, the score rounded to its type
 * between the two (two calls of add8, the score kept in a register). */
PE_INLINE void add8x2(char *o, __m256 x, __m256 y, const int dtype)
{
    if (dtype == PE_F32) {
        float *d = (float *)o;
        _mm256_storeu_ps(d, _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(d), x), y));
        return;
    }
    __m256 a = pe_ps_from_half8(_mm_loadu_si128((const __m128i *)o), dtype);
    a = pe_round8(_mm256_add_ps(a, pe_round8(x, dtype)), dtype);
    _mm_storeu_si128((__m128i *)o, pe_half8_from_ps(_mm256_add_ps(a, pe_round8(y, dtype)), dtype));
}

/* The eight lanes perm[0 .. 8) (relative.h), as int32. */
PE_INLINE __m256i lanes8(const uint8_t *perm)
{
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)perm));
}

/* o[0 .. 4) += x, float64. */
PE_INLINE void add4(char *o, __m256d x)
{
    _mm256_storeu_pd((double *)o, _mm256_add_pd(_mm256_loadu_pd((const double *)o), x));
}

/* ---- by query ---- */

/* The float32 products of scores m .. m + 8 of a segment (segment). */
PE_INLINE __m256 products8(const float *x, ptrdiff_t col, int slope, const int32_t *map,
                           const int32_t *wmin, const uint8_t *perm, ptrdiff_t m)
{
    if (slope == 1)
        return _mm256_loadu_ps(x + col + m);
    if (slope == 0)
        return _mm256_set1_ps(x[col]);
    if (slope == -1)
        return _mm256_permutevar8x32_ps(_mm256_loadu_ps(x + col - m - 7),
                                        _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0));
    int32_t lo = wmin[m];
    return lo >= 0 ? _mm256_permutevar8x32_ps(_mm256_loadu_ps(x + lo), lanes8(perm + 8 * m))
                   : _mm256_i32gather_ps(x, _mm256_loadu_si256((const __m256i *)(map + m)), 4);
}

/* o[0 .. m) += the products of a segment, eight at a time, sixteen for
 * bfloat16 scores (add16) and runs of slope 1 (where, for the other
 * kinds, unrolling measured slower); returns m, the scores added (n less
 * the last n % 8). */
PE_INLINE ptrdiff_t run8(char *o, const float *x, ptrdiff_t col, const int slope,
                         const int32_t *map, const int32_t *wmin, const uint8_t *perm, ptrdiff_t n,
                         const int dtype)
{
    const ptrdiff_t isz = (ptrdiff_t)pe_itemsize(dtype);
    ptrdiff_t m = 0;
    for (; m + 16 <= n && (dtype == PE_BF16 || slope == 1); m += 16)
        add16(o + m * isz, products8(x, col, slope, map, wmin, perm, m),
              products8(x, col, slope, map, wmin, perm, m + 8), dtype);
    for (; m + 8 <= n; m += 8)
        add8(o + m * isz, products8(x, col, slope, map, wmin, perm, m), dtype);
    return m;
}

/* Scores o[0 .. n) of a row += the products p (the row's own) at the
 * columns of segment kind `slope`: p[col + m] (1), p[col] (0), p[col - m]
 * (-1), p[map[m]] (2; map and wmin those of relative.h from the first
 * score's t: eight columns within 8 of the least, one load permuted,
 * else a gather). */
PE_INLINE void segment(char *o, const char *p, ptrdiff_t col, int slope, const int32_t *map,
                       const int32_t *wmin, const uint8_t *perm, ptrdiff_t n, const int dtype)
{
    const ptrdiff_t isz = (ptrdiff_t)pe_itemsize(dtype);
    ptrdiff_t m = 0;
    if (dtype == PE_F64) {
        const double *x = (const double *)p;
        if (slope == 1) {
            for (; m + 4 <= n; m += 4)
                add4(o + m * 8, _mm256_loadu_pd(x + col + m));
        } else if (slope == 0) {
            __m256d v = _mm256_set1_pd(x[col]);
            for (; m + 4 <= n; m += 4)
                add4(o + m * 8, v);
        } else if (slope == -1) {
            for (; m + 4 <= n; m += 4)
                add4(o + m * 8, _mm256_permute4x64_pd(_mm256_loadu_pd(x + col - m - 3), 0x1b));
        } else {
            for (; m + 4 <= n; m += 4)
                add4(o + m * 8,
                     _mm256_i32gather_pd(x, _mm_loadu_si128((const __m128i *)(map + m)), 8));
        }
    } else {
        /* each kind its own loop (products8 inlined with the slope known) */
        const float *x = (const float *)p;
        if (slope == 1)
            m = run8(o, x, col, 1, map, wmin, perm, n, dtype);
        else if (slope == 0)
            m = run8(o, x, col, 0, map, wmin, perm, n, dtype);
        else if (slope == -1)
            m = run8(o, x, col, -1, map, wmin, perm, n, dtype);
        else
            m = run8(o, x, col, 2, map, wmin, perm, n, dtype);
    }
    const ptrdiff_t ssz = dtype == PE_F64 ? 8 : 4;
    for (; m < n; ++m)
        pe_rel_add1(o + m * isz, p + (ptrdiff_t)map[m] * ssz, dtype);
}

/* Row task of the (batch * heads * q_len) rows; its runs of slope 1 added
 * by run1 where not NULL (a row of products into a row of scores, as
 * pe_row_add's PE_ROW_PRODUCT adds it), else by segment(). */
PE_INLINE void row_avx2(const struct pe_rel_gather *g, ptrdiff_t task, pe_row_add_fn run1,
                        const int dtype)
{
    const struct pe_bias_dst *d = g->dst;
    const struct pe_rel_src *s = g->src;
    ptrdiff_t q = d->q_len, k = d->k_len, p = task / q, i = task % q;
    ptrdiff_t b = p / d->heads, h = p % d->heads;
    if (g->prefetch)
        pe_rel_prefetch_row(g, task + 2);
    if (g->map32 == NULL) {
        pe_rel_row_scalar(g, s, b, h, i, 0, k);
        return;
    }
    const ptrdiff_t isz = (ptrdiff_t)pe_itemsize(dtype);
    char *row = d->data + b * d->stride_b + h * d->stride_h + i * d->stride_q;
    const char *prod =
        s->data + (s->batch == 1 ? 0 : b) * s->stride_b + h * s->stride_h + i * s->stride_r;
    ptrdiff_t t0 = q - 1 - i; /* t of key 0 */
    for (ptrdiff_t r = pe_rel_run_at(g->segs, g->nsegs, t0); r < g->nsegs; ++r) {
        const struct pe_rel_run *seg = &g->segs[r];
        ptrdiff_t a = seg->start > t0 ? seg->start : t0;
        ptrdiff_t e = seg[1].start < t0 + k ? seg[1].start : t0 + k;
        if (a >= t0 + k)
            break;
        if (seg->base < 0)
            continue;
        ptrdiff_t col = seg->slope == 2 ? 0 : (ptrdiff_t)seg->base + seg->slope * (a - seg->start);
        if (run1 != NULL && seg->slope == 1)
            run1(row + (a - t0) * isz, prod + col * (ptrdiff_t)g->ssz, e - a);
        else
            segment(row + (a - t0) * isz, prod, col, seg->slope, g->map32 + a, g->wmin + a,
                    g->perm + 8 * a, e - a, dtype);
    }
}

void pe_rel_row_bf16_avx2(const struct pe_rel_gather *g, ptrdiff_t task, pe_row_add_fn run1)
{
    row_avx2(g, task, run1, PE_BF16);
}

/* ---- by key ---- */

/* The eight rows of an 8 x 8 block of floats transposed: row k of the
 * result holds element k of each of v[0 .. 8). */
PE_INLINE void transpose8(__m256 v[8])
{
    __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
    __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
    __m256 t4 = _mm256_unpacklo_ps(v[4], v[5]), t5 = _mm256_unpackhi_ps(v[4], v[5]);
    __m256 t6 = _mm256_unpacklo_ps(v[6], v[7]), t7 = _mm256_unpackhi_ps(v[6], v[7]);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
    v[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    v[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    v[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    v[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    v[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    v[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    v[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    v[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* The products of the 8 x 8 scores [i, i + 8) x [j, j + 8), by key
 * (float32 products), row[k] those of row i + k: key j + l reads row
 * j + l of the products at the columns its eight queries name,
 * map[u + l - ii] for query i + ii (u the t of (i, j)).
 * A run of slope 1 holds them side by side, descending in ii: one load
 * per key from column map[u + l - 7], whose lane k is query i + 7 - k; a
 * run of slope -1 ascending: one load from map[u + l], lane k query
 * i + k; columns within 8 of the least: one load from the least, its
 * lanes permuted; otherwise a gather through the map; lane k query
 * i + 7 - k for these two.
 * The eight vectors, one per key, transposed into the eight rows (`kind`,
 * g->block of the block, not 0: rows8). */
PE_INLINE void block8(const struct pe_rel_gather *g, const char *prod, ptrdiff_t i, ptrdiff_t j,
                      int kind, __m256 row[8])
{
    const ptrdiff_t sr = g->src->stride_r;
    ptrdiff_t u = g->dst->q_len - 1 - i + j;
    const int32_t *m = g->map32 + (u - 7);
    const char *p = prod + j * sr;
    __m256 v[8];
    switch (kind) {
    case 1:
    case -1: { /* m[l] = m[0] + l, or m[l + 7] = m[7] - l: loads a row and a column apart */
        const char *x = p + (ptrdiff_t)m[kind == 1 ? 0 : 7] * 4;
        const ptrdiff_t along = sr + 4 * kind;
        for (int l = 0; l < 8; ++l)
            v[l] = _mm256_loadu_ps((const float *)(x + l * along));
        break;
    }
    case 4:
        for (int l = 0; l < 8; ++l) {
            int32_t lo = g->wmin[u - 7 + l];
            v[l] = _mm256_permutevar8x32_ps(_mm256_loadu_ps((const float *)(p + l * sr) + lo),
                                            lanes8(g->perm + 8 * (u - 7 + l)));
        }
        break;
    default:
        for (int l = 0; l < 8; ++l)
            v[l] = _mm256_i32gather_ps((const float *)(p + l * sr),
                                       _mm256_loadu_si256((const __m256i *)(m + l)), 4);
        break;
    }
    transpose8(v);
    for (int k = 0; k < 8; ++k)
        row[k] = v[kind == -1 ? k : 7 - k];
}

/* Blocks of one column (a run of slope 0) read it from a copy (tiles_avx2),
 * col[0 .. ke) or col[ke .. 2 ke), made at the first such block: in place
 * the column's products lie a row of products apart, often a power of two
 * of bytes, so that the lines of the strips' keys fight for few sets of
 * the caches. */
struct column_copy {
    float *col;
    ptrdiff_t ke;
    int32_t held[2];
    int victim;
};

/* The eight keys' products from j of column c, from the copy (made if not
 * held). */
PE_INLINE __m256 copied8(struct column_copy *cc, const char *prod, ptrdiff_t stride_r, int32_t c,
                         ptrdiff_t j)
{
    int slot = cc->held[0] == c ? 0 : cc->held[1] == c ? 1 : -1;
    if (slot < 0) {
        slot = cc->victim;
        cc->victim ^= 1;
        cc->held[slot] = c;
        for (ptrdiff_t r = 0; r < cc->ke; ++r)
            cc->col[slot * cc->ke + r] = *((const float *)(prod + r * stride_r) + c);
    } else {
        cc->victim = slot ^ 1;
    }
    return _mm256_loadu_ps(cc->col + slot * cc->ke + j);
}

/* The products of a block's rows (block8); a run of slope 0 holds a single
 * column: one vector of the eight keys' products, the same for every row,
 * read from the copy if there is one, else gathered down the column
 * (m: the strip's map, m[j + l] key j + l's column for query i + 7). */
PE_INLINE void rows8(const struct pe_rel_gather *g, struct column_copy *cc, const char *prod,
                     const int32_t *m, ptrdiff_t i, ptrdiff_t j, int kind, __m256 row[8])
{
    if (kind != 0) {
        block8(g, prod, i, j, kind, row);
        return;
    }
    const ptrdiff_t sr = g->src->stride_r;
    __m256 w =
        cc->col != NULL
            ? copied8(cc, prod, sr, m[j], j)
            : _mm256_i32gather_ps(
                  (const float *)(prod + j * sr),
                  _mm256_add_epi32(_mm256_set1_epi32(m[j]),
                                   _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                                      _mm256_set1_epi32((int)(sr / 4)))),
                  4);
    for (int l = 0; l < 8; ++l)
        row[l] = w;
}

/* The float32 products of g->first (by query) for eight keys of a row,
 * from the row's products x, t that of the first key: eight columns within
 * 8 of the least, one load permuted, else a gather through the map (whose
 * entries are >= 0 where the block's kind is not 3). */
PE_INLINE __m256 first8(const struct pe_rel_gather *g, const float *x, ptrdiff_t t)
{
    int32_t lo = g->wmin[t];
    return lo >= 0 ? _mm256_permutevar8x32_ps(_mm256_loadu_ps(x + lo), lanes8(g->perm + 8 * t))
                   : _mm256_i32gather_ps(x, _mm256_loadu_si256((const __m256i *)(g->map32 + t)), 4);
}

/* Row of tiles task of the (batch * heads * tiles_q) ones, in strips of
 * eight rows of scores, each walked along its keys in blocks of 8 x 8
 * (the lines eight keys' rows of products hold for eight queries, read
 * once; the next strip reads them again from L2), with a hint to fetch
 * the lines of scores the next strip will add into, eight rows below, in
 * the order of their addresses, spread over the strip's blocks (the CPU's
 * own prefetchers fall behind eight rows read a block at a time, and so
 * do hints given along the eight rows, a column at a time).  bfloat16
 * scores take two blocks together, sixteen scores a row (add16), where
 * the first is not of a run of slope 1 or -1.
 * Blocks whose distances meet a map entry < 0, and the rows and keys past
 * the last whole block, go the portable way. */
PE_INLINE void tiles_avx2(const struct pe_rel_gather *g, ptrdiff_t task, const int both,
                          const int dtype)
{
    const struct pe_bias_dst *d = g->dst;
    const struct pe_rel_src *s = g->src;
    ptrdiff_t p = task / g->tiles_q, i0 = task % g->tiles_q * PE_REL_TILE;
    ptrdiff_t i1 = d->q_len - i0 < PE_REL_TILE ? d->q_len : i0 + PE_REL_TILE;
    ptrdiff_t b = p / d->heads, h = p % d->heads, k = d->k_len, q = d->q_len;
    /* the gathers' offsets (eight rows and a column) must fit int32 */
    int vector = dtype != PE_F64 && g->map32 != NULL && g->block != NULL && s->stride_r >= 0 &&
                 s->stride_r % 4 == 0 && s->stride_r / 4 <= (INT32_MAX - s->width) / 8;
    if (!vector) {
        for (ptrdiff_t c = 0; c < g->tiles_k; ++c) {
            ptrdiff_t j0 = c * PE_REL_TILE, j1 = k - j0 < PE_REL_TILE ? k : j0 + PE_REL_TILE;
            pe_rel_tile_scalar(g, b, h, i0, i1, j0, j1);
        }
        return;
    }
    const char *prod = s->data + (s->batch == 1 ? 0 : b) * s->stride_b + h * s->stride_h;
    const struct pe_rel_src *f = g->first;
    const char *first =
        both ? f->data + (f->batch == 1 ? 0 : b) * f->stride_b + h * f->stride_h : NULL;
    const ptrdiff_t fsr = both ? f->stride_r : 0;
    char *out = d->data + b * d->stride_b + h * d->stride_h;
    ptrdiff_t i = i0, ke = k / 8 * 8, sq = d->stride_q, isz = (ptrdiff_t)pe_itemsize(dtype);
    /* blocks of one column from a copy (column_copy; without memory for
     * it, the gather of block8) */
    struct column_copy cc = {
        i1 - i0 >= 16 && ke >= 64 ? malloc(2 * (size_t)ke * sizeof(float)) : NULL, ke, {-1, -1}, 0};
    /* a row's k scores lie in per lines at most (its first byte anywhere in a line) */
    const ptrdiff_t width = k * isz, per = (width + 63) / 64 + 1, lines = 8 * per;
    for (; i + 8 <= i1; i += 8) {
        const int32_t *m = g->map32 + (q - 8 - i); /* m[j + l]: key j + l, query i + 7 */
        /* the next strip's rows of scores (this task's or the next task's),
         * hinted in the order of their addresses: line t of `lines` at the
         * block t * (ke / 8) / lines */
        const char *ahead = i + 16 <= q ? out + (i + 8) * sq : NULL;
        ptrdiff_t t = 0;
        for (ptrdiff_t j = 0; j < ke; j += 8) {
            ptrdiff_t last = ahead == NULL ? 0 : (j + 8) / 8 * lines / (ke / 8);
            for (; t < last; ++t) {
                ptrdiff_t at = t % per * 64;
                pe_rel_prefetch(ahead + t / per * sq + (at < width ? at : width - 1));
            }
            int kind = g->block[q - 8 - i + j];
            if (kind == 3) {
                pe_rel_tile_scalar(g, b, h, i, i + 8, j, j + 8);
                continue;
            }
            if (both && j + 8 + AHEAD_KEYS <= ke) {
                /* the products of a block AHEAD_KEYS on: the rows of keys
                 * (one a key, a row of products apart: no prefetcher
                 * follows them) and those of the strip's queries, read
                 * down their columns */
                const ptrdiff_t ja = j + AHEAD_KEYS, ua = q - 1 - i + ja;
                for (int l = 0; l < 8; ++l) {
                    pe_rel_prefetch(prod + (ja + l) * s->stride_r + (ptrdiff_t)m[ja + l] * 4);
                    pe_rel_prefetch(first + (i + l) * fsr + (ptrdiff_t)g->map32[ua - l + 7] * 4);
                }
            }
            __m256 row[8];
            rows8(g, &cc, prod, m, i, j, kind, row);
            char *o = out + i * sq + j * isz;
            if (both) { /* row i + l: first's products, then these */
                const ptrdiff_t u = q - 1 - i + j;
                for (int l = 0; l < 8; ++l) {
                    const float *x = (const float *)(first + (i + l) * fsr);
                    /* one column for the whole block (kind 0): its value */
                    __m256 c = kind == 0 ? _mm256_set1_ps(x[g->map32[u]]) : first8(g, x, u - l);
                    add8x2(o + l * sq, c, row[l], dtype);
                }
                continue;
            }
            /* bfloat16: this block and the next, sixteen scores a row (add16),
             * but for runs of slope 1 and -1, whose blocks took longer so */
            int next = dtype == PE_BF16 && j + 16 <= ke && kind != 1 && kind != -1
                           ? g->block[q - 8 - i + j + 8]
                           : 3;
            if (next != 3) {
                __m256 row2[8];
                rows8(g, &cc, prod, m, i, j + 8, next, row2);
                for (int l = 0; l < 8; ++l)
                    add16(o + l * sq, row[l], row2[l], dtype);
                j += 8;
                continue;
            }
            for (int l = 0; l < 8; ++l)
                add8(o + l * sq, row[l], dtype);
        }
        if (ke < k)
            pe_rel_tile_scalar(g, b, h, i, i + 8, ke, k);
    }
    free(cc.col);
    if (i < i1)
        for (ptrdiff_t j = 0; j < k; j += PE_REL_TILE)
            pe_rel_tile_scalar(g, b, h, i, i1, j, k - j < PE_REL_TILE ? k : j + PE_REL_TILE);
}

PE_INLINE void task_avx2(const struct pe_rel_gather *g, ptrdiff_t task, const int by_key,
                         const int dtype)
{
    if (by_key && g->first != NULL)
        tiles_avx2(g, task, 1, dtype);
    else if (by_key)
        tiles_avx2(g, task, 0, dtype);
    else
        row_avx2(g, task, NULL, dtype);
}

PE_SPECIALISE(const pe_rel_task_fn, pe_rel_task_avx2, task_avx2,
              (const struct pe_rel_gather *g, ptrdiff_t task), (g, task));

PE_AVX2_END
#endif
