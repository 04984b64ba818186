/*
 * sinusoid.c -- the absolute sinusoidal table of Vaswani et al.
 *
 * A table of n positions by dim columns is pure output: nothing is read but
 * dim/2 frequencies, so its floor is the time to write n * dim elements.
 *
 * Computing sin and cos of every element directly (sincos.h) costs about 40
 * vector operations per four angles, more than the stores on this kind of
 * machine.  The rows are therefore made by pe_sincos_group (sincos.c), one
 * cell of the anchor grid (PE_ANCHOR rows) at a time: for evenly spaced
 * positions (an int n, k * arange(n)) an exact row every PE_ANCHOR rows and
 * the rows between rotated from it in float64, values too close to zero
 * recomputed, so float32 and float16 tables are within 1 ulp of the float64
 * value; float64 tables, and positions that are not evenly spaced, are
 * computed directly.  Each row is then rounded and stored in its layout.
 *
 * The AVX2 store does four columns per step; the portable one the same
 * roundings one column at a time, so both give the same bits.  Cells of
 * rows are shared among OpenMP threads; a cell is never split, so the bits
 * do not depend on the thread count either.
 */
#include <math.h>
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "pe.h"
#include "simd.h"

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

#endif

/* Where a group's rows go: rows r0 + j of out. */
struct sink {
    char *out;
    ptrdiff_t row_stride, r0, half;
    int layout, dtype;
};

static void emit_scalar(void *ctx, ptrdiff_t j, const double *s, const double *c)
{
    const struct sink *k = ctx;
    char *row = k->out + (k->r0 + j) * k->row_stride;
    for (ptrdiff_t i = 0; i < k->half; ++i)
        store1(row, i, k->half, k->layout, k->dtype, s[i], c[i]);
}

#if PE_X86
PE_TARGET_AVX2 static void emit_avx2(void *ctx, ptrdiff_t j, const double *s, const double *c)
{
    const struct sink *k = ctx;
    char *row = k->out + (k->r0 + j) * k->row_stride;
    ptrdiff_t i = 0, half = k->half;
    for (; i + 4 <= half; i += 4)
        store4(row, i, half, k->layout, k->dtype, _mm256_loadu_pd(s + i), _mm256_loadu_pd(c + i));
    for (; i < half; ++i)
        store1(row, i, half, k->layout, k->dtype, s[i], c[i]);
}
#endif

int pe_sinusoid(const double *pos, ptrdiff_t n_pos, const double *freq, ptrdiff_t half, int layout,
                int dtype, char *out, ptrdiff_t row_stride, int nthreads)
{
    ptrdiff_t ncells = (n_pos + PE_ANCHOR - 1) / PE_ANCHOR;
    int parallel = ncells > 1 && n_pos * half * 2 >= PE_PARALLEL_MIN && nthreads > 1;
    if (!parallel)
        nthreads = 1;
    /* a thread's rotor: the current row and the step's sin and cos */
    ptrdiff_t per_thread = 4 * half;
    double *scratch = malloc((size_t)(per_thread * nthreads) * sizeof *scratch);
    if (scratch == NULL)
        return -1;
    double wmax = pe_max_abs(freq, half);
    pe_row_fn emit = emit_scalar;
#if PE_X86
    if (pe_use_avx2())
        emit = emit_avx2;
#endif
#pragma omp parallel num_threads(nthreads) if (parallel)
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        double *buf = scratch + tid * per_thread;
        struct pe_rotor rt = {buf, buf + half, buf + 2 * half, buf + 3 * half, NAN};
#pragma omp for schedule(static)
        for (ptrdiff_t t = 0; t < ncells; ++t) {
            ptrdiff_t r0 = t * PE_ANCHOR;
            ptrdiff_t n = n_pos - r0 < PE_ANCHOR ? n_pos - r0 : PE_ANCHOR;
            struct sink k = {out, row_stride, r0, half, layout, dtype};
            pe_sincos_group(&rt, (const char *)(pos + r0), sizeof *pos, n, freq, half, wmax,
                            dtype != PE_F64, emit, &k);
        }
    }
    free(scratch);
    return 0;
}
