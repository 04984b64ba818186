/*
 * sinusoid_avx2.c -- the cells of sinusoid.c on the AVX2 path: four columns
 * of sin and cos per step, rotated and stored in the same pass, rounded as
 * the portable cells round them (the same bits).
 */
#include "pe.h"
#include "simd.h"
#include "sincos.h"
#include "sinusoid.h"

#include "avx2.h"

#if PE_X86
/* Columns j .. j + 3 of a row, as pe_sinusoid_store1 stores each. */
PE_INLINE void store4(char *row, ptrdiff_t j, ptrdiff_t half, const int layout, const int dtype,
                      __m256d vs, __m256d vc)
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
        /* float64 -> float32 -> 16 bits rounds twice, which misses the nearest
         * 16-bit value only when the float32 lands exactly half-way between
         * two of them (the 13 low bits 0x1000 for float16, the 16 low bits
         * 0x8000 for bfloat16) or, for float16, is below its normal range
         * (bfloat16's range is float32's); those rare vectors take the exact
         * scalar conversion. */
        __m128 fs = _mm256_cvtpd_ps(vs), fc = _mm256_cvtpd_ps(vc);
        __m256 v = _mm256_set_m128(fc, fs);
        __m256i bits = _mm256_castps_si256(v);
        const int bf = dtype == PE_BF16;
        __m256i tie =
            _mm256_cmpeq_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(bf ? 0xffff : 0x1fff)),
                               _mm256_set1_epi32(bf ? 0x8000 : 0x1000));
        __m256 exact = _mm256_castsi256_ps(tie);
        if (!bf)
            exact = _mm256_or_ps(exact, _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), v),
                                                      _mm256_set1_ps(0x1p-14f), _CMP_LT_OQ));
        if (_mm256_movemask_ps(exact)) {
            double sv[4], cv[4];
            _mm256_storeu_pd(sv, vs);
            _mm256_storeu_pd(cv, vc);
            for (int k = 0; k < 4; ++k)
                pe_sinusoid_store1(row, j + k, half, layout, dtype, sv[k], cv[k]);
            return;
        }
        uint16_t *o = (uint16_t *)row;
        if (layout == PE_INTERLEAVED) {
            __m256 w = _mm256_set_m128(_mm_unpackhi_ps(fs, fc), _mm_unpacklo_ps(fs, fc));
            _mm_storeu_si128((__m128i *)(o + 2 * j), pe_half8_from_ps(w, dtype));
        } else {
            __m128i h = pe_half8_from_ps(v, dtype);
            _mm_storel_epi64((__m128i *)(o + j), h);
            _mm_storel_epi64((__m128i *)(o + half + j), _mm_unpackhi_epi64(h, h));
        }
    }
}

/* The cell of sinusoid.c's cell_scalar, four columns per step (pe_sincos4,
 * pe_rotate4). */
PE_INLINE void cell_avx2(struct pe_rotor *rt, const double *pos, ptrdiff_t r0, ptrdiff_t n,
                         const double *freq, ptrdiff_t half, double wmax, char *out,
                         ptrdiff_t row_stride, const int layout, const int dtype)
{
    double m = 0.0;
    int rotate = pe_group_rotates(pe_sincos_row_avx2, rt, (const char *)(pos + r0), sizeof *pos, n,
                                  freq, half, wmax, dtype != PE_F64, &m);
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
                pe_sinusoid_store1(row, j, half, layout, dtype, s[j], c[j]);
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
        pe_sinusoid_rotate_tail(row, j, half, s, c, rt->sd, rt->cd, freq, m, p, layout, dtype);
    }
}

PE_SPECIALISE(const pe_sinusoid_cell_fn, pe_sinusoid_cell_avx2, cell_avx2, PE_SINUSOID_CELL_PARAMS,
              PE_SINUSOID_CELL_ARGS);

PE_AVX2_END
#endif
