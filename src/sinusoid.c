/*
 * sinusoid.c -- the absolute sinusoidal table of Vaswani et al.
 *
 * A table of n positions by dim columns is pure output: nothing is read but
 * dim/2 frequencies, so its floor is the time to write n * dim elements.
 *
 * Computing sin and cos of every element directly (sincos.h) costs about 40
 * vector operations per four angles, more than the stores on this kind of
 * machine.  Tables of evenly spaced positions (an int n, k * arange(n)) are
 * therefore made by rotation: an exact anchor row every PE_ANCHOR rows, and
 * the rows between by rotating the previous one by the step's angle (two
 * multiplies and two multiply-adds per pair, in float64).  A rotated value
 * differs from sin/cos of the float64 angle fl(p * w) by the rounding of
 * that angle (up to 2**-53 of it) plus ~2**-46 of rotation error: far below
 * a float32 ulp of the value, except for values close to zero; those (below
 * the threshold of rotation_floor) are recomputed directly, so float32 and
 * float16 tables are within 1 ulp of the float64 value everywhere.  float64
 * tables, and positions that are not evenly spaced, are computed directly.
 *
 * The AVX2 path goes through a block row by row, so that the stores are
 * sequential, with the rotating state of a row in two small L1 buffers; the
 * portable path does the same arithmetic one column at a time, so both give
 * the same bits.  Blocks of rows are shared among OpenMP threads.
 */
#include <math.h>
#include <stdlib.h>

#include "pe.h"
#include "sincos.h"

#define PE_ROW_CHUNK 256

/* Element index of sin and cos of column j in a row. */
static inline ptrdiff_t sin_index(ptrdiff_t j, int layout)
{
    return layout == PE_INTERLEAVED ? 2 * j : j;
}
static inline ptrdiff_t cos_index(ptrdiff_t j, ptrdiff_t half, int layout)
{
    return layout == PE_INTERLEAVED ? 2 * j + 1 : half + j;
}

static inline void store1(char *row, ptrdiff_t j, ptrdiff_t half, int layout, int dtype, double s,
                          double c)
{
    pe_store(row, sin_index(j, layout), dtype, s);
    pe_store(row, cos_index(j, half, layout), dtype, c);
}

/* The smallest |value| a rotation may produce at angle ~ |pos| * w and keep.
 * It differs from sin/cos of fl(pos * w) by at most |pos| w 2**-51 (the
 * roundings of the anchor's angle, of the step's and of the target's) plus
 * 2**-46 (arithmetic over PE_ANCHOR steps); a value 2**25 times that size
 * is within half a float32 ulp, which rounding turns into at most one. */
static inline double rotation_floor(double pos, double w)
{
    return fma(fabs(pos) * 0x1p-26, w, 0x1p-21);
}

/* (s, c) at angle a becomes (s, c) at a + delta; sd, cd: sin, cos of delta.
 * Returns 0 when either result is below `floor` and must be recomputed. */
static inline int rotate1(double *s, double *c, double sd, double cd, double floor)
{
    double s0 = *s, c0 = *c;
    *s = fma(s0, cd, c0 * sd);
    *c = fma(c0, cd, -(s0 * sd));
    return fabs(*s) >= floor && fabs(*c) >= floor;
}

/* Columns [j0, j1) of rows [r0, r1): direct, or rotated from row r0 by
 * the step's (sdv, cdv) when those are given. */
static void block_scalar(const double *pos, ptrdiff_t r0, ptrdiff_t r1, const double *sdv,
                         const double *cdv, const double *freq, ptrdiff_t j0, ptrdiff_t j1,
                         ptrdiff_t half, int layout, int dtype, char *out, ptrdiff_t row_stride)
{
    for (ptrdiff_t j = j0; j < j1; ++j) {
        double s = 0.0, c = 1.0;
        for (ptrdiff_t r = r0; r < r1; ++r) {
            if (r == r0 || sdv == NULL ||
                !rotate1(&s, &c, sdv[j], cdv[j], rotation_floor(pos[r], freq[j])))
                pe_sincos1(pos[r] * freq[j], &s, &c);
            store1(out + r * row_stride, j, half, layout, dtype, s, c);
        }
    }
}

#if PE_X86
PE_TARGET_AVX2 static inline
    __attribute__((always_inline)) void store4(char *row, ptrdiff_t j, ptrdiff_t half, int layout,
                                               int dtype, __m256d vs, __m256d vc)
{
    if (dtype == PE_F64) {
        double *o = (double *)row;
        if (layout == PE_INTERLEAVED) {
            __m256d a = _mm256_unpacklo_pd(vs, vc), b = _mm256_unpackhi_pd(vs, vc);
            _mm256_storeu_pd(o + 2 * j, _mm256_permute2f128_pd(a, b, 0x20));
            _mm256_storeu_pd(o + 2 * j + 4, _mm256_permute2f128_pd(a, b, 0x31));
        } else {
            _mm256_storeu_pd(o + j, vs);
            _mm256_storeu_pd(o + half + j, vc);
        }
    } else if (dtype == PE_F32) {
        __m128 fs = _mm256_cvtpd_ps(vs), fc = _mm256_cvtpd_ps(vc);
        float *o = (float *)row;
        if (layout == PE_INTERLEAVED) {
            _mm256_storeu_ps(o + 2 * j,
                             _mm256_set_m128(_mm_unpackhi_ps(fs, fc), _mm_unpacklo_ps(fs, fc)));
        } else {
            _mm_storeu_ps(o + j, fs);
            _mm_storeu_ps(o + half + j, fc);
        }
    } else {
        /* float64 -> float32 -> float16 rounds twice, which misses the nearest
         * float16 only when the float32 lands exactly half-way between two
         * float16 values (13 low bits 0x1000) or is below the normal float16
         * range; those rare vectors take the exact scalar conversion. */
        __m128 fs = _mm256_cvtpd_ps(vs), fc = _mm256_cvtpd_ps(vc);
        __m256 v = _mm256_set_m128(fc, fs);
        __m256i bits = _mm256_castps_si256(v);
        __m256i tie = _mm256_cmpeq_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x1fff)),
                                         _mm256_set1_epi32(0x1000));
        __m256 tiny = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), v),
                                    _mm256_set1_ps(0x1p-14f), _CMP_LT_OQ);
        if (_mm256_movemask_ps(_mm256_or_ps(_mm256_castsi256_ps(tie), tiny))) {
            double sv[4], cv[4];
            _mm256_storeu_pd(sv, vs);
            _mm256_storeu_pd(cv, vc);
            for (int k = 0; k < 4; ++k)
                store1(row, j + k, half, layout, PE_F16, sv[k], cv[k]);
            return;
        }
        uint16_t *o = (uint16_t *)row;
        if (layout == PE_INTERLEAVED) {
            __m256 w = _mm256_set_m128(_mm_unpackhi_ps(fs, fc), _mm_unpacklo_ps(fs, fc));
            _mm_storeu_si128((__m128i *)(o + 2 * j), _mm256_cvtps_ph(w, _MM_FROUND_TO_NEAREST_INT));
        } else {
            _mm_storel_epi64((__m128i *)(o + j), _mm_cvtps_ph(fs, _MM_FROUND_TO_NEAREST_INT));
            _mm_storel_epi64((__m128i *)(o + half + j),
                             _mm_cvtps_ph(fc, _MM_FROUND_TO_NEAREST_INT));
        }
    }
}

/* Columns [ja, jb) of rows [r0, r1), rotated from row r0, one row after the
 * other so that the stores are sequential; the rotating state of the row
 * lives in two small buffers in L1. */
PE_TARGET_AVX2 static inline __attribute__((always_inline)) void
rotated_rows_avx2(const double *pos, ptrdiff_t r0, ptrdiff_t r1, const double *sdv,
                  const double *cdv, const double *freq, ptrdiff_t ja, ptrdiff_t jb, ptrdiff_t half,
                  const int layout, const int dtype, char *out, ptrdiff_t row_stride, double *sbuf,
                  double *cbuf)
{
    const __m256d neg = _mm256_set1_pd(-0.0);
    char *row = out + r0 * row_stride;
    for (ptrdiff_t j = ja; j < jb; j += 4) {
        __m256d s, c;
        pe_sincos4(_mm256_mul_pd(_mm256_set1_pd(pos[r0]), _mm256_loadu_pd(freq + j)), &s, &c);
        _mm256_storeu_pd(sbuf + j - ja, s);
        _mm256_storeu_pd(cbuf + j - ja, c);
        store4(row, j, half, layout, dtype, s, c);
    }
    for (ptrdiff_t r = r0 + 1; r < r1; ++r) {
        const __m256d p = _mm256_set1_pd(pos[r]);
        /* rotation_floor: |pos| * 2**-26 * w + 2**-21 */
        const __m256d scaled = _mm256_set1_pd(fabs(pos[r]) * 0x1p-26);
        row = out + r * row_stride;
        for (ptrdiff_t j = ja; j < jb; j += 4) {
            __m256d s0 = _mm256_loadu_pd(sbuf + j - ja), c0 = _mm256_loadu_pd(cbuf + j - ja);
            __m256d sd = _mm256_loadu_pd(sdv + j), cd = _mm256_loadu_pd(cdv + j);
            __m256d s = _mm256_fmadd_pd(s0, cd, _mm256_mul_pd(c0, sd));
            __m256d c = _mm256_fmadd_pd(c0, cd, _mm256_xor_pd(_mm256_mul_pd(s0, sd), neg));
            __m256d w = _mm256_loadu_pd(freq + j);
            __m256d floor = _mm256_fmadd_pd(scaled, w, _mm256_set1_pd(0x1p-21));
            __m256d small =
                _mm256_or_pd(_mm256_cmp_pd(_mm256_andnot_pd(neg, s), floor, _CMP_LT_OQ),
                             _mm256_cmp_pd(_mm256_andnot_pd(neg, c), floor, _CMP_LT_OQ));
            if (_mm256_movemask_pd(small)) { /* as rotate1: those lanes directly */
                __m256d se, ce;
                pe_sincos4(_mm256_mul_pd(p, w), &se, &ce);
                s = _mm256_blendv_pd(s, se, small);
                c = _mm256_blendv_pd(c, ce, small);
            }
            _mm256_storeu_pd(sbuf + j - ja, s);
            _mm256_storeu_pd(cbuf + j - ja, c);
            store4(row, j, half, layout, dtype, s, c);
        }
    }
}

/* Inlined with constant layout and dtype below, so the inner loops have no
 * branch but their own. */
PE_TARGET_AVX2 static inline __attribute__((always_inline)) void
block_avx2_impl(const double *pos, ptrdiff_t r0, ptrdiff_t r1, const double *sdv, const double *cdv,
                const double *freq, ptrdiff_t half, const int layout, const int dtype, char *out,
                ptrdiff_t row_stride)
{
    ptrdiff_t j = 0;
    if (sdv == NULL) {
        for (; j + 4 <= half; j += 4) {
            __m256d w = _mm256_loadu_pd(freq + j), s, c;
            for (ptrdiff_t r = r0; r < r1; ++r) {
                pe_sincos4(_mm256_mul_pd(_mm256_set1_pd(pos[r]), w), &s, &c);
                store4(out + r * row_stride, j, half, layout, dtype, s, c);
            }
        }
    } else {
        /* state of the rotation, for the columns done in vectors */
        double sbuf[PE_ROW_CHUNK], cbuf[PE_ROW_CHUNK];
        while (j + 4 <= half) {
            ptrdiff_t n = half - j < PE_ROW_CHUNK ? (half - j) & ~(ptrdiff_t)3 : PE_ROW_CHUNK;
            rotated_rows_avx2(pos, r0, r1, sdv, cdv, freq, j, j + n, half, layout, dtype, out,
                              row_stride, sbuf, cbuf);
            j += n;
        }
    }
    block_scalar(pos, r0, r1, sdv, cdv, freq, j, half, half, layout, dtype, out, row_stride);
}

PE_TARGET_AVX2 static void block_avx2(const double *pos, ptrdiff_t r0, ptrdiff_t r1,
                                      const double *sdv, const double *cdv, const double *freq,
                                      ptrdiff_t half, int layout, int dtype, char *out,
                                      ptrdiff_t row_stride)
{
#define PE_BLOCK_CASE(L, D)                                                                        \
    if (layout == L && dtype == D) {                                                               \
        block_avx2_impl(pos, r0, r1, sdv, cdv, freq, half, L, D, out, row_stride);                 \
        return;                                                                                    \
    }
    PE_BLOCK_CASE(PE_INTERLEAVED, PE_F32)
    PE_BLOCK_CASE(PE_CONCAT, PE_F32)
    PE_BLOCK_CASE(PE_INTERLEAVED, PE_F16)
    PE_BLOCK_CASE(PE_CONCAT, PE_F16)
    PE_BLOCK_CASE(PE_INTERLEAVED, PE_F64)
    PE_BLOCK_CASE(PE_CONCAT, PE_F64)
#undef PE_BLOCK_CASE
}
#endif

void pe_sinusoid(const double *pos, ptrdiff_t n_pos, const double *freq, ptrdiff_t half, int layout,
                 int dtype, char *out, ptrdiff_t row_stride, int nthreads)
{
    /* sin and cos of the step's angles, shared by every block; without them
     * (float64 output, uneven positions, no memory) rows are direct. */
    double step, *sdv = NULL, *cdv = NULL;
    if (dtype != PE_F64 && pe_progression((const char *)pos, sizeof *pos, n_pos, &step) &&
        (sdv = malloc(2 * (size_t)half * sizeof *sdv)) != NULL) {
        cdv = sdv + half;
        pe_sincos_row(step, freq, half, sdv, cdv);
    }
    ptrdiff_t ntasks = (n_pos + PE_ANCHOR - 1) / PE_ANCHOR;
    int parallel = ntasks > 1 && n_pos * half * 2 >= PE_PARALLEL_MIN && nthreads > 1;
    int avx2 = pe_use_avx2();
#pragma omp parallel for schedule(static) num_threads(nthreads) if (parallel)
    for (ptrdiff_t t = 0; t < ntasks; ++t) {
        ptrdiff_t r0 = t * PE_ANCHOR;
        ptrdiff_t r1 = r0 + PE_ANCHOR < n_pos ? r0 + PE_ANCHOR : n_pos;
#if PE_X86
        if (avx2) {
            block_avx2(pos, r0, r1, sdv, cdv, freq, half, layout, dtype, out, row_stride);
            continue;
        }
#endif
        block_scalar(pos, r0, r1, sdv, cdv, freq, 0, half, half, layout, dtype, out, row_stride);
    }
    free(sdv);
    (void)avx2;
}
