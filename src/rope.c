/*
 * rope.c -- rotary position embedding (Su et al., RoFormer): every pair of
 * the first 2*half elements of a row is rotated by the angle pos * freq[i],
 *
 *     a' = a cos - b sin,   b' = b cos + a sin,
 *
 * where the pair is (x[i], x[i + half]) in the "half" layout (GPT-NeoX,
 * Llama in transformers) and (x[2i], x[2i + 1]) in the "interleaved" one
 * (GPT-J, RoFormer, Meta's Llama); the rest of the row is copied.
 *
 * Memory traffic.  A rotation is a few FMAs per element, so the kernel is
 * bound by reading x and writing out, exactly the bytes np.copyto moves; the
 * design keeps everything else out of main memory:
 *
 * - cos and sin are never materialised for the whole array.  The rows of x
 *   are described by their leading dimensions (any strides: only the last
 *   axis must be contiguous, so views are not copied) and the positions by
 *   an array of the same leading shape whose broadcast dimensions have
 *   stride 0.  The dimensions along which the position varies are cut into
 *   tiles; a thread computes cos/sin for the positions of one tile (at most
 *   PE_ROPE_TILE_BYTES, kept in L2) and then rotates every row that uses
 *   them (all batches and heads), walking them in the memory order of x.
 *   Each position's cos/sin is computed once, and the row -> cos/sin
 *   mapping costs nothing per row: it is a stride.
 * - When cos/sin change from row to row (the sequence axis innermost, as in
 *   transformers' (batch, heads, seq, dim)), PE_ROPE_LANES rows of the next
 *   dimension out (heads) are rotated together, so each cos/sin vector is
 *   loaded once for all of them: four sequential streams, and a quarter of
 *   the table reads.
 * - A large output is written with non-temporal stores: it would not stay
 *   in cache anyway, and reading its lines before writing them would cost
 *   half as much traffic again.  Rows of lanes are rotated into a small L1
 *   buffer and streamed out one lane after the other, so that the
 *   write-combining buffers fill whole lines.
 *
 * Precision.  The angle is the float64 product pos * freq[i] and its sine
 * and cosine are computed in float64 (pe_sincos_row), multiplied by the
 * attention factor and rounded once to the compute precision: float32 for
 * float16/float32 data, float64 for float64 data.  The rotation is then one
 * multiply and one FMA per output in that precision.  Forming the phase in
 * float32 instead, as many implementations do, loses most of its digits at
 * positions near 2**24; here cos and sin are within 1 ulp there.  For
 * float32 tables, runs of evenly spaced positions get their sin and cos by
 * rotating an exact anchor row (see fill_table), a few times cheaper than
 * a sincos and just as accurate after rounding to float32.
 *
 * Paths.  The AVX2 path does 8 (float32, float16 through F16C) or 4
 * (float64) elements per step; the portable path is the same arithmetic one
 * element at a time (fmaf/fma in the same order), so both give the same
 * bits.  OpenMP threads take tiles (or, when there are few, slices of the
 * outermost broadcast dimension) dynamically.
 */
#include <math.h>
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "pe.h"
#include "simd.h"

/* Bytes of cos/sin a thread keeps for one tile: they stay in L2 while the
 * rows using them stream through, and a tile is long enough (256 positions
 * of a 128-wide float32 head) for the hardware prefetchers. */
#define PE_ROPE_TILE_BYTES 131072
/* Rows of an outer dimension rotated together with one cos/sin row when the
 * cos/sin change along the innermost dimension. */
#define PE_ROPE_LANES 4
/* Tasks per thread wanted for balance when there are few tiles. */
#define PE_ROPE_TASKS_PER_THREAD 4

/* ---- one run of rows: portable path ---- */

/* Rotate pairs [i0, half) of one row of type dtype.  tab: the row's cos
 * then sin (already scaled, sin negated for the inverse), float64 for
 * float64 data and float32 otherwise: float16 is rotated in float32. */
static inline __attribute__((always_inline)) void rotate_row(const char *x, char *o,
                                                             const char *tab, ptrdiff_t half,
                                                             ptrdiff_t i0, const int layout,
                                                             const int dtype)
{
    for (ptrdiff_t i = i0; i < half; ++i) {
        ptrdiff_t ia = layout == PE_ROPE_HALF ? i : 2 * i;
        ptrdiff_t ib = layout == PE_ROPE_HALF ? i + half : 2 * i + 1;
        if (dtype == PE_F64) {
            const double *c = (const double *)tab, *s = c + half, *xd = (const double *)x;
            double a = xd[ia], b = xd[ib];
            ((double *)o)[ia] = fma(a, c[i], -(b * s[i]));
            ((double *)o)[ib] = fma(b, c[i], a * s[i]);
            continue;
        }
        const float *c = (const float *)tab, *s = c + half;
        float a, b;
        if (dtype == PE_F32) {
            a = ((const float *)x)[ia], b = ((const float *)x)[ib];
        } else {
            a = pe_f32_from_f16(((const uint16_t *)x)[ia]);
            b = pe_f32_from_f16(((const uint16_t *)x)[ib]);
        }
        float ra = fmaf(a, c[i], -(b * s[i])), rb = fmaf(b, c[i], a * s[i]);
        if (dtype == PE_F32) {
            ((float *)o)[ia] = ra, ((float *)o)[ib] = rb;
        } else {
            ((uint16_t *)o)[ia] = pe_f16_from_f32(ra);
            ((uint16_t *)o)[ib] = pe_f16_from_f32(rb);
        }
    }
}

/* The columns past the rotary part are copied (nothing to do in place). */
static inline void pass_through(const char *x, char *o, ptrdiff_t half, ptrdiff_t dim, int dtype)
{
    size_t es = pe_itemsize(dtype);
    if (x != o && dim > 2 * half)
        memcpy(o + 2 * half * es, x + 2 * half * es, (size_t)(dim - 2 * half) * es);
}

/* A run of rows that the innermost loop rotates: n rows (row m at x +
 * m*xs, out at o + m*os, its cos/sin at tab + m*ts: cos[half] then
 * sin[half], float32 or float64), each together with `lanes` rows of an
 * outer dimension that share its cos/sin (lane g at + g*lxs, + g*los). */
struct run {
    const char *x;
    char *o;
    const char *tab;
    ptrdiff_t xs, os, ts, n;
    ptrdiff_t lanes, lxs, los;
    ptrdiff_t half, dim;
    int stream;   /* the output is large: non-temporal stores where aligned */
    char *bounce; /* a thread's buffer of one row per lane (see run_avx2_bounced) */
};

typedef void (*run_fn)(const struct run *r);

static inline __attribute__((always_inline)) void run_scalar_impl(const struct run *r,
                                                                  const int layout, const int dtype)
{
    ptrdiff_t half = r->half;
    for (ptrdiff_t m = 0; m < r->n; ++m) {
        const char *t = r->tab + m * r->ts;
        for (ptrdiff_t g = 0; g < r->lanes; ++g) {
            const char *xr = r->x + m * r->xs + g * r->lxs;
            char *orow = r->o + m * r->os + g * r->los;
            rotate_row(xr, orow, t, half, 0, layout, dtype);
            pass_through(xr, orow, half, r->dim, dtype);
        }
    }
}

#define PE_RUN_SCALAR(name, L, D)                                                                  \
    static void name(const struct run *r)                                                          \
    {                                                                                              \
        run_scalar_impl(r, L, D);                                                                  \
    }
PE_RUN_SCALAR(run_scalar_half_f16, PE_ROPE_HALF, PE_F16)
PE_RUN_SCALAR(run_scalar_half_f32, PE_ROPE_HALF, PE_F32)
PE_RUN_SCALAR(run_scalar_half_f64, PE_ROPE_HALF, PE_F64)
PE_RUN_SCALAR(run_scalar_inter_f16, PE_ROPE_INTERLEAVED, PE_F16)
PE_RUN_SCALAR(run_scalar_inter_f32, PE_ROPE_INTERLEAVED, PE_F32)
PE_RUN_SCALAR(run_scalar_inter_f64, PE_ROPE_INTERLEAVED, PE_F64)
#undef PE_RUN_SCALAR

/* ---- one run of rows: AVX2 + FMA + F16C ---- */

#if PE_X86
/* (a, b) -> (a c - b s, b c + a s) on eight pairs held in two vectors. */
PE_TARGET_AVX2 static inline __attribute__((always_inline)) void
rot8(__m256 a, __m256 b, __m256 c, __m256 s, __m256 *ra, __m256 *rb)
{
    *ra = _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s));
    *rb = _mm256_fmadd_ps(b, c, _mm256_mul_ps(a, s));
}

/* Eight interleaved elements (four pairs) with cos/sin already duplicated
 * into pairs: fmaddsub subtracts in the even lanes and adds in the odd
 * ones, which is the rotation once the pairs are swapped for the second
 * product. */
PE_TARGET_AVX2 static inline __attribute__((always_inline)) __m256 rot_inter8(__m256 v, __m256 cc,
                                                                              __m256 ss)
{
    __m256 sw = _mm256_permute_ps(v, 0xB1);
    return _mm256_fmaddsub_ps(v, cc, _mm256_mul_ps(sw, ss));
}

/* Four floats at p as (p0, p0, p1, p1, p2, p2, p3, p3). */
PE_TARGET_AVX2 static inline __attribute__((always_inline)) __m256 dup4(const float *p)
{
    const __m256i idx = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(p)), idx);
}

PE_TARGET_AVX2 static inline __attribute__((always_inline)) __m256 load_h8(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* Stores of eight floats, four doubles or eight halves; with stream, as
 * non-temporal stores (16-byte aligned p): an output that does not fit in
 * cache then goes to memory without being read first, so that rotating out
 * of place moves the bytes np.copyto moves, not half as many again. */
PE_TARGET_AVX2 static inline __attribute__((always_inline)) void store_ps(float *p, __m256 v,
                                                                          const int stream)
{
    if (stream) {
        _mm_stream_ps(p, _mm256_castps256_ps128(v));
        _mm_stream_ps(p + 4, _mm256_extractf128_ps(v, 1));
    } else {
        _mm256_storeu_ps(p, v);
    }
}

PE_TARGET_AVX2 static inline __attribute__((always_inline)) void store_pd(double *p, __m256d v,
                                                                          const int stream)
{
    store_ps((float *)p, _mm256_castpd_ps(v), stream); /* the same 32 bytes */
}

PE_TARGET_AVX2 static inline __attribute__((always_inline)) void store_h8(uint16_t *p, __m256 v,
                                                                          const int stream)
{
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    if (stream)
        _mm_stream_si128((__m128i *)p, h);
    else
        _mm_storeu_si128((__m128i *)p, h);
}

/* One row's cos/sin applied to the `lanes` rows that share it: each vector
 * of cos/sin is loaded (and, interleaved, duplicated) once for all of them. */
PE_TARGET_AVX2 static inline __attribute__((always_inline)) void
rows_avx2(const char *x0, ptrdiff_t lxs, char *o0, ptrdiff_t los, ptrdiff_t lanes, const char *t,
          ptrdiff_t half, const int layout, const int dtype, const int stream)
{
    ptrdiff_t i = 0;
    if (dtype == PE_F32 || dtype == PE_F16) {
        const float *c = (const float *)t, *s = c + half;
        if (layout == PE_ROPE_HALF) {
            for (; i + 8 <= half; i += 8) {
                __m256 cv = _mm256_loadu_ps(c + i), sv = _mm256_loadu_ps(s + i), ra, rb;
                for (ptrdiff_t g = 0; g < lanes; ++g) {
                    if (dtype == PE_F32) {
                        const float *x = (const float *)(x0 + g * lxs);
                        float *o = (float *)(o0 + g * los);
                        rot8(_mm256_loadu_ps(x + i), _mm256_loadu_ps(x + half + i), cv, sv, &ra,
                             &rb);
                        store_ps(o + i, ra, stream);
                        store_ps(o + half + i, rb, stream);
                    } else {
                        const uint16_t *x = (const uint16_t *)(x0 + g * lxs);
                        uint16_t *o = (uint16_t *)(o0 + g * los);
                        rot8(load_h8(x + i), load_h8(x + half + i), cv, sv, &ra, &rb);
                        store_h8(o + i, ra, stream);
                        store_h8(o + half + i, rb, stream);
                    }
                }
            }
        } else {
            for (; i + 4 <= half; i += 4) {
                __m256 cc = dup4(c + i), ss = dup4(s + i);
                for (ptrdiff_t g = 0; g < lanes; ++g) {
                    if (dtype == PE_F32) {
                        const float *x = (const float *)(x0 + g * lxs);
                        float *o = (float *)(o0 + g * los);
                        store_ps(o + 2 * i, rot_inter8(_mm256_loadu_ps(x + 2 * i), cc, ss), stream);
                    } else {
                        const uint16_t *x = (const uint16_t *)(x0 + g * lxs);
                        uint16_t *o = (uint16_t *)(o0 + g * los);
                        store_h8(o + 2 * i, rot_inter8(load_h8(x + 2 * i), cc, ss), stream);
                    }
                }
            }
        }
        for (ptrdiff_t g = 0; g < lanes; ++g)
            rotate_row(x0 + g * lxs, o0 + g * los, t, half, i, layout, dtype);
    } else {
        const double *c = (const double *)t, *s = c + half;
        if (layout == PE_ROPE_HALF) {
            for (; i + 4 <= half; i += 4) {
                __m256d cv = _mm256_loadu_pd(c + i), sv = _mm256_loadu_pd(s + i);
                for (ptrdiff_t g = 0; g < lanes; ++g) {
                    const double *x = (const double *)(x0 + g * lxs);
                    double *o = (double *)(o0 + g * los);
                    __m256d a = _mm256_loadu_pd(x + i), b = _mm256_loadu_pd(x + half + i);
                    store_pd(o + i, _mm256_fmsub_pd(a, cv, _mm256_mul_pd(b, sv)), stream);
                    store_pd(o + half + i, _mm256_fmadd_pd(b, cv, _mm256_mul_pd(a, sv)), stream);
                }
            }
        } else {
            for (; i + 2 <= half; i += 2) {
                __m256d cc =
                    _mm256_permute4x64_pd(_mm256_castpd128_pd256(_mm_loadu_pd(c + i)), 0x50);
                __m256d ss =
                    _mm256_permute4x64_pd(_mm256_castpd128_pd256(_mm_loadu_pd(s + i)), 0x50);
                for (ptrdiff_t g = 0; g < lanes; ++g) {
                    const double *x = (const double *)(x0 + g * lxs);
                    double *o = (double *)(o0 + g * los);
                    __m256d v = _mm256_loadu_pd(x + 2 * i);
                    __m256d sw = _mm256_permute_pd(v, 0x5);
                    store_pd(o + 2 * i, _mm256_fmaddsub_pd(v, cc, _mm256_mul_pd(sw, ss)), stream);
                }
            }
        }
        for (ptrdiff_t g = 0; g < lanes; ++g)
            rotate_row(x0 + g * lxs, o0 + g * los, t, half, i, layout, dtype);
    }
}

PE_TARGET_AVX2 static inline __attribute__((always_inline)) void
run_avx2_loop(const struct run *r, const int layout, const int dtype, const int stream)
{
    for (ptrdiff_t m = 0; m < r->n; ++m) {
        const char *x = r->x + m * r->xs;
        char *o = r->o + m * r->os;
        rows_avx2(x, r->lxs, o, r->los, r->lanes, r->tab + m * r->ts, r->half, layout, dtype,
                  stream);
        for (ptrdiff_t g = 0; g < r->lanes; ++g)
            pass_through(x + g * r->lxs, o + g * r->los, r->half, r->dim, dtype);
    }
}

/* Lanes written straight to memory with non-temporal stores would fill
 * several partial cache lines at once, and the write-combining buffers
 * would flush them half empty.  So each row of all lanes is rotated into a
 * buffer in L1, then streamed out one lane after the other: every lane
 * leaves at most the one line shared with its next row open. */
PE_TARGET_AVX2 static inline __attribute__((always_inline)) void
run_avx2_bounced(const struct run *r, const int layout, const int dtype)
{
    ptrdiff_t rb = 2 * r->half * (ptrdiff_t)pe_itemsize(dtype);
    for (ptrdiff_t m = 0; m < r->n; ++m) {
        const char *x = r->x + m * r->xs;
        char *o = r->o + m * r->os;
        rows_avx2(x, r->lxs, r->bounce, rb, r->lanes, r->tab + m * r->ts, r->half, layout, dtype,
                  0);
        for (ptrdiff_t g = 0; g < r->lanes; ++g) {
            pe_stream_copy(o + g * r->los, r->bounce + g * rb, rb);
            pass_through(x + g * r->lxs, o + g * r->los, r->half, r->dim, dtype);
        }
    }
}

PE_TARGET_AVX2 static inline __attribute__((always_inline)) void
run_avx2_impl(const struct run *r, const int layout, const int dtype)
{
    /* non-temporal stores need every vector store 16-byte aligned; the
     * bounced copy of whole rows needs rows of a multiple of 16 bytes */
    ptrdiff_t half_bytes = r->half * (ptrdiff_t)pe_itemsize(dtype);
    int stream = r->stream && r->x != r->o && (uintptr_t)r->o % 16 == 0 &&
                 (r->n == 1 || r->os % 16 == 0) && (r->lanes == 1 || r->los % 16 == 0) &&
                 (layout == PE_ROPE_INTERLEAVED || half_bytes % 16 == 0);
    if (stream && r->lanes > 1 && half_bytes % 8 == 0) {
        run_avx2_bounced(r, layout, dtype);
        _mm_sfence();
    } else if (stream && r->lanes == 1) {
        run_avx2_loop(r, layout, dtype, 1);
        _mm_sfence();
    } else {
        run_avx2_loop(r, layout, dtype, 0);
    }
}

#define PE_RUN_AVX2(name, L, D)                                                                    \
    PE_TARGET_AVX2 static void name(const struct run *r)                                           \
    {                                                                                              \
        run_avx2_impl(r, L, D);                                                                    \
    }
PE_RUN_AVX2(run_avx2_half_f16, PE_ROPE_HALF, PE_F16)
PE_RUN_AVX2(run_avx2_half_f32, PE_ROPE_HALF, PE_F32)
PE_RUN_AVX2(run_avx2_half_f64, PE_ROPE_HALF, PE_F64)
PE_RUN_AVX2(run_avx2_inter_f16, PE_ROPE_INTERLEAVED, PE_F16)
PE_RUN_AVX2(run_avx2_inter_f32, PE_ROPE_INTERLEAVED, PE_F32)
PE_RUN_AVX2(run_avx2_inter_f64, PE_ROPE_INTERLEAVED, PE_F64)
#undef PE_RUN_AVX2
#endif

static run_fn choose_run(int layout, int dtype)
{
    static const run_fn scalar[2][3] = {
        {run_scalar_half_f16, run_scalar_half_f32, run_scalar_half_f64},
        {run_scalar_inter_f16, run_scalar_inter_f32, run_scalar_inter_f64},
    };
#if PE_X86
    static const run_fn avx2[2][3] = {
        {run_avx2_half_f16, run_avx2_half_f32, run_avx2_half_f64},
        {run_avx2_inter_f16, run_avx2_inter_f32, run_avx2_inter_f64},
    };
    if (pe_use_avx2())
        return avx2[layout][dtype];
#endif
    return scalar[layout][dtype];
}

/* ---- cos/sin of a tile ---- */

/* Rows of a tile whose positions are evenly spaced (the usual arange, with
 * or without an offset) are made by rotation (pe_sincos_group): an exact
 * anchor row every PE_ANCHOR rows of the index along the tiled dimension,
 * which is always an axis of the caller's array (never merged with another
 * along which the positions vary), and tiles are whole cells of that grid,
 * so the bits depend neither on the tiling, the thread count nor the memory
 * layout.  float64 tables are always direct. */

/* Where a tile's rows go: row j of tab, cos then sin of the angles, times
 * scale (sin times sscale: negated for the inverse rotation), rounded once
 * to float32 or float64. */
struct table_sink {
    char *tab;
    ptrdiff_t half;
    double scale, sscale;
    int f64;
};

static void emit_table_row(void *ctx, ptrdiff_t j, const double *s, const double *c)
{
    const struct table_sink *k = ctx;
    ptrdiff_t half = k->half;
    if (k->f64) {
        double *t = (double *)k->tab + j * 2 * half;
        for (ptrdiff_t i = 0; i < half; ++i) {
            t[i] = c[i] * k->scale;
            t[half + i] = s[i] * k->sscale;
        }
    } else {
        float *t = (float *)k->tab + j * 2 * half;
        for (ptrdiff_t i = 0; i < half; ++i) {
            t[i] = (float)(c[i] * k->scale);
            t[half + i] = (float)(s[i] * k->sscale);
        }
    }
}

/* Rows j < n of the table for the positions at pos + j * pos_stride bytes;
 * row 0 is a multiple of PE_ANCHOR along its dimension. */
static void fill_table(const char *pos, ptrdiff_t pos_stride, ptrdiff_t n, const double *freq,
                       ptrdiff_t half, double wmax, double scale, int inverse, int tab_f64,
                       char *tab, struct pe_rotor *rt)
{
    for (ptrdiff_t g0 = 0; g0 < n; g0 += PE_ANCHOR) {
        ptrdiff_t len = n - g0 < PE_ANCHOR ? n - g0 : PE_ANCHOR;
        struct table_sink k = {tab + g0 * 2 * half * (tab_f64 ? 8 : 4), half, scale,
                               inverse ? -scale : scale, tab_f64};
        pe_sincos_group(rt, pos + g0 * pos_stride, pos_stride, len, freq, half, wmax, !tab_f64,
                        emit_table_row, &k);
    }
}

/* ---- the plan: dimensions, tiles, tasks ---- */

struct pe_dimension {
    ptrdiff_t n, xs, os, ps; /* length; strides of x, out, positions in bytes */
};

struct plan {
    int nd;
    struct pe_dimension d[PE_ROPE_MAXDIM];
    int k;             /* the tiled dimension: innermost one where the position varies, or -1 */
    int split;         /* broadcast dimension sliced among threads, or -1 */
    ptrdiff_t tile;    /* tile length along k */
    ptrdiff_t nchunks; /* tiles along k */
    ptrdiff_t n_other; /* product of the other dimensions where the position varies */
    ptrdiff_t nslices; /* slices of the split dimension */
    ptrdiff_t slice;   /* their length */
    ptrdiff_t ntasks;
    int stream; /* output too large for the caches: non-temporal stores */
};

static ptrdiff_t abs_pd(ptrdiff_t v)
{
    return v < 0 ? -v : v;
}

static ptrdiff_t ceil_div(ptrdiff_t a, ptrdiff_t b)
{
    return (a + b - 1) / b;
}

/* Dimensions of length > 1, outermost first in x's memory (so that rows are
 * visited as they lie), adjacent ones merged where all three strides allow
 * and the positions do not vary along them: the anchor grid of the tables
 * stays on an axis of the caller's array, whatever its layout. */
static int simplify(const struct pe_rope_args *a, struct plan *p)
{
    int nd = 0;
    for (int i = 0; i < a->ndim; ++i) {
        if (a->shape[i] == 0)
            return -1; /* nothing to do */
        if (a->shape[i] == 1)
            continue;
        p->d[nd].n = a->shape[i];
        p->d[nd].xs = a->x_strides[i];
        p->d[nd].os = a->out_strides[i];
        p->d[nd].ps = a->pos_strides[i];
        ++nd;
    }
    /* stable insertion sort by |x stride|, then |out stride|, descending */
    for (int i = 1; i < nd; ++i) {
        struct pe_dimension v = p->d[i];
        int j = i;
        while (j > 0 &&
               (abs_pd(p->d[j - 1].xs) < abs_pd(v.xs) || (abs_pd(p->d[j - 1].xs) == abs_pd(v.xs) &&
                                                          abs_pd(p->d[j - 1].os) < abs_pd(v.os)))) {
            p->d[j] = p->d[j - 1];
            --j;
        }
        p->d[j] = v;
    }
    int m = 0;
    for (int i = 0; i < nd; ++i) {
        if (m > 0) {
            struct pe_dimension *o = &p->d[m - 1], *in = &p->d[i];
            if (o->ps == 0 && in->ps == 0 && o->xs == in->xs * in->n && o->os == in->os * in->n) {
                o->n *= in->n;
                o->xs = in->xs, o->os = in->os, o->ps = in->ps;
                continue;
            }
        }
        p->d[m++] = p->d[i];
    }
    p->nd = m;
    return 0;
}

static void make_plan(struct plan *p, ptrdiff_t rowbytes, int nthreads)
{
    p->k = -1;
    p->n_other = 1;
    for (int i = 0; i < p->nd; ++i) {
        if (p->d[i].ps != 0) {
            if (p->k >= 0)
                p->n_other *= p->d[p->k].n;
            p->k = i;
        }
    }
    ptrdiff_t nk = p->k >= 0 ? p->d[p->k].n : 1;
    /* whole cells of the anchor grid per tile, even when rows are long */
    ptrdiff_t tile = PE_ROPE_TILE_BYTES / rowbytes;
    ptrdiff_t unit = PE_ANCHOR;
    tile = tile < unit ? unit : tile - tile % unit;
    ptrdiff_t target = nthreads > 1 ? (ptrdiff_t)nthreads * PE_ROPE_TASKS_PER_THREAD : 1;
    /* few tiles: shorter ones, before slicing the broadcast rows */
    if (p->n_other * ceil_div(nk, tile) < target) {
        ptrdiff_t want = ceil_div(target, p->n_other);
        ptrdiff_t t = ceil_div(ceil_div(nk, want), unit) * unit;
        tile = t < tile ? t : tile;
    }
    p->tile = tile > nk ? nk : tile;
    p->nchunks = ceil_div(nk, p->tile);
    p->split = -1;
    p->nslices = 1;
    p->slice = 1;
    ptrdiff_t ntiles = p->n_other * p->nchunks;
    if (ntiles < target) {
        for (int i = 0; i < p->nd; ++i)
            if (p->d[i].ps == 0) {
                p->split = i;
                break;
            }
        if (p->split >= 0) {
            ptrdiff_t ns = p->d[p->split].n, want = ceil_div(target, ntiles);
            p->slice = ceil_div(ns, want < ns ? want : ns);
            p->nslices = ceil_div(ns, p->slice);
        }
    }
    p->ntasks = ntiles * p->nslices;
}

/* One task: fixed indices of the other varying dimensions, one tile along
 * k, one slice of the split dimension; every row in that box. */
static void run_task(const struct pe_rope_args *a, const struct plan *p, ptrdiff_t task, run_fn run,
                     ptrdiff_t rowbytes, double wmax, char *tab, struct pe_rotor *rt, char *bounce)
{
    const char *xb = a->x, *pb = a->pos;
    char *ob = a->out;
    ptrdiff_t slice_i = task % p->nslices;
    ptrdiff_t rest = task / p->nslices;
    ptrdiff_t chunk = rest % p->nchunks;
    ptrdiff_t other = rest / p->nchunks;
    for (int i = p->nd - 1; i >= 0; --i) {
        if (p->d[i].ps == 0 || i == p->k)
            continue;
        ptrdiff_t idx = other % p->d[i].n;
        other /= p->d[i].n;
        xb += idx * p->d[i].xs, ob += idx * p->d[i].os, pb += idx * p->d[i].ps;
    }
    ptrdiff_t ntab = 1, pstride = 0;
    if (p->k >= 0) {
        const struct pe_dimension *dk = &p->d[p->k];
        ptrdiff_t j0 = chunk * p->tile;
        ntab = dk->n - j0 < p->tile ? dk->n - j0 : p->tile;
        xb += j0 * dk->xs, ob += j0 * dk->os, pb += j0 * dk->ps;
        pstride = dk->ps;
    }
    fill_table(pb, pstride, ntab, a->freq, a->half, wmax, a->scale, a->inverse, a->dtype == PE_F64,
               tab, rt);

    /* the box: broadcast dimensions and k, in memory order */
    struct pe_dimension box[PE_ROPE_MAXDIM];
    ptrdiff_t ts[PE_ROPE_MAXDIM];
    int nb = 0;
    for (int i = 0; i < p->nd; ++i) {
        if (p->d[i].ps != 0 && i != p->k)
            continue;
        box[nb] = p->d[i];
        ts[nb] = 0;
        if (i == p->k) {
            box[nb].n = ntab;
            ts[nb] = rowbytes;
        } else if (i == p->split) {
            ptrdiff_t s0 = slice_i * p->slice;
            box[nb].n = p->d[i].n - s0 < p->slice ? p->d[i].n - s0 : p->slice;
            xb += s0 * p->d[i].xs, ob += s0 * p->d[i].os;
        }
        ++nb;
    }
    struct run r = {.x = xb,
                    .o = ob,
                    .tab = tab,
                    .n = 1,
                    .lanes = 1,
                    .half = a->half,
                    .dim = a->dim,
                    .stream = p->stream,
                    .bounce = bounce};
    if (nb == 0) {
        run(&r);
        return;
    }
    /* innermost: the run; if the table row changes along it, the next
     * dimension out (where it does not) supplies lanes sharing each row */
    int in = nb - 1, lane = nb >= 2 && ts[in] != 0 && ts[in - 1] == 0 ? in - 1 : -1;
    int nouter = lane >= 0 ? lane : in;
    ptrdiff_t nlane = lane >= 0 ? box[lane].n : 1;
    r.xs = box[in].xs, r.os = box[in].os, r.ts = ts[in], r.n = box[in].n;
    if (lane >= 0)
        r.lxs = box[lane].xs, r.los = box[lane].os;
    ptrdiff_t idx[PE_ROPE_MAXDIM] = {0};
    const char *xp = xb, *tp = tab;
    char *op = ob;
    for (;;) {
        for (ptrdiff_t g = 0; g < nlane; g += PE_ROPE_LANES) {
            r.x = xp + (lane >= 0 ? g * box[lane].xs : 0);
            r.o = op + (lane >= 0 ? g * box[lane].os : 0);
            r.tab = tp;
            r.lanes = nlane - g < PE_ROPE_LANES ? nlane - g : PE_ROPE_LANES;
            run(&r);
        }
        int d = nouter - 1;
        for (; d >= 0; --d) {
            if (++idx[d] < box[d].n) {
                xp += box[d].xs, op += box[d].os, tp += ts[d];
                break;
            }
            xp -= (box[d].n - 1) * box[d].xs, op -= (box[d].n - 1) * box[d].os;
            tp -= (box[d].n - 1) * ts[d];
            idx[d] = 0;
        }
        if (d < 0)
            break;
    }
}

int pe_rope_apply(const struct pe_rope_args *a, int nthreads)
{
    if (a->ndim > PE_ROPE_MAXDIM || a->half < 1 || 2 * a->half > a->dim)
        return -2;
    struct plan p;
    if (simplify(a, &p) < 0)
        return 0;
    ptrdiff_t nrows = 1;
    for (int i = 0; i < p.nd; ++i)
        nrows *= p.d[i].n;
    ptrdiff_t tab_es = a->dtype == PE_F64 ? 8 : 4;
    ptrdiff_t rowbytes = 2 * a->half * tab_es;
    int parallel = nthreads > 1 && nrows * a->dim >= PE_PARALLEL_MIN;
    if (!parallel)
        nthreads = 1;
    make_plan(&p, rowbytes, nthreads);
    p.stream = nrows * a->dim * (ptrdiff_t)pe_itemsize(a->dtype) >= PE_STREAM_BYTES;

    double wmax = pe_max_abs(a->freq, a->half);

    /* scratch per thread: the tile's table, then float64 sin and cos rows,
     * allocated here so that a failure happens before anything is written */
    ptrdiff_t tab_bytes = (p.tile * rowbytes + 63) / 64 * 64;
    ptrdiff_t sc_bytes = (4 * a->half * 8 + 63) / 64 * 64;
    ptrdiff_t bounce_bytes =
        (PE_ROPE_LANES * 2 * a->half * (ptrdiff_t)pe_itemsize(a->dtype) + 63) / 64 * 64;
    ptrdiff_t per_thread = tab_bytes + sc_bytes + bounce_bytes;
    char *scratch = malloc((size_t)(per_thread * nthreads));
    if (scratch == NULL)
        return -1;
    run_fn run = choose_run(a->layout, a->dtype);

#pragma omp parallel num_threads(nthreads) if (parallel)
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        char *mine = scratch + (ptrdiff_t)tid * per_thread;
        double *buf = (double *)(mine + tab_bytes);
        struct pe_rotor rt = {buf, buf + a->half, buf + 2 * a->half, buf + 3 * a->half, NAN};
        char *bounce = mine + tab_bytes + sc_bytes;
        /* dynamic: on a busy machine a descheduled thread leaves its tiles
         * to the others instead of holding up the whole call */
#pragma omp for schedule(dynamic, 1)
        for (ptrdiff_t t = 0; t < p.ntasks; ++t)
            run_task(a, &p, t, run, rowbytes, wmax, mine, &rt, bounce);
    }
    free(scratch);
    return 0;
}

/* ---- cos/sin tables (rope_cos_sin) ---- */

/* Column i of a row and the column of its second copy. */
static inline void put_pair(char *row, ptrdiff_t i, ptrdiff_t half, int layout, int dtype, double v)
{
    if (layout == PE_ROPE_HALF) {
        pe_store(row, i, dtype, v);
        pe_store(row, half + i, dtype, v);
    } else {
        pe_store(row, 2 * i, dtype, v);
        pe_store(row, 2 * i + 1, dtype, v);
    }
}

/* Where rows of rope_cos_sin go: rows r0 + j of cos_out and sin_out. */
struct pair_sink {
    char *cos_out, *sin_out;
    ptrdiff_t cos_stride, sin_stride, r0, half;
    double scale;
    int layout, dtype;
};

static void emit_pair_row(void *ctx, ptrdiff_t j, const double *s, const double *c)
{
    const struct pair_sink *k = ctx;
    char *crow = k->cos_out + (k->r0 + j) * k->cos_stride;
    char *srow = k->sin_out + (k->r0 + j) * k->sin_stride;
    for (ptrdiff_t i = 0; i < k->half; ++i) {
        put_pair(crow, i, k->half, k->layout, k->dtype, c[i] * k->scale);
        put_pair(srow, i, k->half, k->layout, k->dtype, s[i] * k->scale);
    }
}

int pe_rope_table(const double *pos, ptrdiff_t n, const double *freq, ptrdiff_t half, double scale,
                  int layout, int dtype, char *cos_out, ptrdiff_t cos_stride, char *sin_out,
                  ptrdiff_t sin_stride, int nthreads)
{
    ptrdiff_t ncells = (n + PE_ANCHOR - 1) / PE_ANCHOR;
    int parallel = nthreads > 1 && ncells > 1 && n * half * 4 >= PE_PARALLEL_MIN;
    if (!parallel)
        nthreads = 1;
    ptrdiff_t per_thread = 4 * half;
    double *scratch = malloc((size_t)(per_thread * nthreads) * sizeof *scratch);
    if (scratch == NULL)
        return -1;
    double wmax = pe_max_abs(freq, half);
#pragma omp parallel num_threads(nthreads) if (parallel)
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        double *buf = scratch + tid * per_thread;
        struct pe_rotor rt = {buf, buf + half, buf + 2 * half, buf + 3 * half, NAN};
#pragma omp for schedule(dynamic, 2)
        for (ptrdiff_t t = 0; t < ncells; ++t) {
            ptrdiff_t r0 = t * PE_ANCHOR, len = n - r0 < PE_ANCHOR ? n - r0 : PE_ANCHOR;
            struct pair_sink k = {cos_out, sin_out, cos_stride, sin_stride, r0,
                                  half,    scale,   layout,     dtype};
            pe_sincos_group(&rt, (const char *)(pos + r0), sizeof *pos, len, freq, half, wmax,
                            dtype != PE_F64, emit_pair_row, &k);
        }
    }
    free(scratch);
    return 0;
}
