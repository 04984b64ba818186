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
#include "sincos.h"

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

/* Where a cell's rows go (portable path): rows r0 + j of out. */
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

static void cell_scalar(struct pe_rotor *rt, const double *pos, ptrdiff_t r0, ptrdiff_t n,
                        const double *freq, ptrdiff_t half, double wmax, char *out,
                        ptrdiff_t row_stride, int layout, int dtype)
{
    struct sink k = {out, row_stride, r0, half, layout, dtype};
    pe_sincos_group(rt, (const char *)(pos + r0), sizeof *pos, n, freq, half, wmax, dtype != PE_F64,
                    emit_scalar, &k);
}

#if PE_X86
/* The same cell with the rotation (pe_rotate4) fused with the stores: the
 * rotating row stays in rt->s, rt->c (L1), each row is stored as it is
 * made.  Inlined with constant layout and dtype below. */
PE_TARGET_AVX2 static inline __attribute__((always_inline)) void
cell_avx2_impl(struct pe_rotor *rt, const double *pos, ptrdiff_t r0, ptrdiff_t n,
               const double *freq, ptrdiff_t half, double wmax, char *out, ptrdiff_t row_stride,
               const int layout, const int dtype)
{
    double m = 0.0;
    int rotate = pe_group_rotates(rt, (const char *)(pos + r0), sizeof *pos, n, freq, half, wmax,
                                  dtype != PE_F64, &m);
    double *s = rt->s, *c = rt->c;
    for (ptrdiff_t r = 0; r < n; ++r) {
        double p = pos[r0 + r];
        char *row = out + (r0 + r) * row_stride;
        const __m256d vpos = _mm256_set1_pd(p), vm = _mm256_set1_pd(m);
        ptrdiff_t j = 0;
        if (!rotate || r == 0) {
            for (; j + 4 <= half; j += 4) {
                __m256d vs, vc;
                pe_sincos4(_mm256_mul_pd(vpos, _mm256_loadu_pd(freq + j)), &vs, &vc);
                _mm256_storeu_pd(s + j, vs);
                _mm256_storeu_pd(c + j, vc);
                store4(row, j, half, layout, dtype, vs, vc);
            }
            for (; j < half; ++j) {
                pe_sincos1(p * freq[j], &s[j], &c[j]);
                store1(row, j, half, layout, dtype, s[j], c[j]);
            }
            continue;
        }
        for (; j + 4 <= half; j += 4) {
            __m256d vs = _mm256_loadu_pd(s + j), vc = _mm256_loadu_pd(c + j);
            pe_rotate4(&vs, &vc, _mm256_loadu_pd(rt->sd + j), _mm256_loadu_pd(rt->cd + j),
                       _mm256_loadu_pd(freq + j), vm, vpos);
            _mm256_storeu_pd(s + j, vs);
            _mm256_storeu_pd(c + j, vc);
            store4(row, j, half, layout, dtype, vs, vc);
        }
        for (; j < half; ++j) {
            pe_rotate1(&s[j], &c[j], rt->sd[j], rt->cd[j], freq[j], m, p);
            store1(row, j, half, layout, dtype, s[j], c[j]);
        }
    }
}

typedef void (*cell_fn)(struct pe_rotor *rt, const double *pos, ptrdiff_t r0, ptrdiff_t n,
                        const double *freq, ptrdiff_t half, double wmax, char *out,
                        ptrdiff_t row_stride, int layout, int dtype);

#define PE_CELL_AVX2(name, L, D)                                                                   \
    PE_TARGET_AVX2 static void name(struct pe_rotor *rt, const double *pos, ptrdiff_t r0,          \
                                    ptrdiff_t n, const double *freq, ptrdiff_t half, double wmax,  \
                                    char *out, ptrdiff_t row_stride, int layout, int dtype)        \
    {                                                                                              \
        (void)layout, (void)dtype;                                                                 \
        cell_avx2_impl(rt, pos, r0, n, freq, half, wmax, out, row_stride, L, D);                   \
    }
PE_CELL_AVX2(cell_avx2_inter_f16, PE_INTERLEAVED, PE_F16)
PE_CELL_AVX2(cell_avx2_inter_f32, PE_INTERLEAVED, PE_F32)
PE_CELL_AVX2(cell_avx2_inter_f64, PE_INTERLEAVED, PE_F64)
PE_CELL_AVX2(cell_avx2_concat_f16, PE_CONCAT, PE_F16)
PE_CELL_AVX2(cell_avx2_concat_f32, PE_CONCAT, PE_F32)
PE_CELL_AVX2(cell_avx2_concat_f64, PE_CONCAT, PE_F64)
#undef PE_CELL_AVX2
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
#if PE_X86
    static const cell_fn avx2[2][3] = {
        {cell_avx2_inter_f16, cell_avx2_inter_f32, cell_avx2_inter_f64},
        {cell_avx2_concat_f16, cell_avx2_concat_f32, cell_avx2_concat_f64},
    };
    cell_fn cell = pe_use_avx2() ? avx2[layout][dtype] : cell_scalar;
#else
    void (*cell)(struct pe_rotor *, const double *, ptrdiff_t, ptrdiff_t, const double *, ptrdiff_t,
                 double, char *, ptrdiff_t, int, int) = cell_scalar;
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
            cell(&rt, pos, r0, n, freq, half, wmax, out, row_stride, layout, dtype);
        }
    }
    free(scratch);
    return 0;
}
