/*
 * sinusoid_avx512.c -- the cells of sinusoid.c on the AVX-512 path: eight
 * columns of sin and cos per step (pe_sincos8, pe_rotate8), rotated and
 * stored in the same pass, rounded as the portable cells round them (the
 * same bits): float64 narrowed to float32 eight at a time, and float32 to
 * float16 (or bfloat16) sixteen at a time, sin and cos together.
 */
#include "pe.h"
#include "simd.h"
#include "sincos.h"
#include "sinusoid.h"

#include "avx512.h"

#if PE_X86
/* sin (lanes 0-7) and cos (lanes 8-15) of eight columns as the sixteen
 * elements of an interleaved row, s0 c0 s1 c1 ... */
/* Eight floats a and eight b as a0 b0 a1 b1 ... (one VPERMT2PS). */
PE_INLINE __m512 interleave2(__m256 a, __m256 b)
{
    const __m512i idx = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    return _mm512_permutex2var_ps(_mm512_castps256_ps512(a), idx, _mm512_castps256_ps512(b));
}

PE_INLINE __m512 interleave16(__m512 v)
{
    const __m512i idx = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
    return _mm512_permutexvar_ps(idx, v);
}

/* Columns j .. j + 7 of a row, as pe_sinusoid_store1 stores each. */
PE_INLINE void store8(char *row, ptrdiff_t j, ptrdiff_t half, const int layout, const int dtype,
                      __m512d vs, __m512d vc)
{
    if (dtype == PE_F64) {
        double *o = (double *)row;
        if (layout == PE_INTERLEAVED) {
            const __m512i lo = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11);
            const __m512i hi = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
            _mm512_storeu_pd(o + 2 * j, _mm512_permutex2var_pd(vs, lo, vc));
            _mm512_storeu_pd(o + 2 * j + 8, _mm512_permutex2var_pd(vs, hi, vc));
        } else {
            _mm512_storeu_pd(o + j, vs);
            _mm512_storeu_pd(o + half + j, vc);
        }
        return;
    }
    __m256 fs = _mm512_cvtpd_ps(vs), fc = _mm512_cvtpd_ps(vc);
    if (dtype == PE_F32) {
        float *o = (float *)row;
        if (layout == PE_INTERLEAVED) {
            _mm512_storeu_ps(o + 2 * j, interleave2(fs, fc));
        } else {
            _mm256_storeu_ps(o + j, fs);
            _mm256_storeu_ps(o + half + j, fc);
        }
        return;
    }
    /* float64 -> float32 -> 16 bits rounds twice, which misses the nearest
     * 16-bit value only when the float32 lands exactly half-way between two
     * of them or, for float16, below its normal range: those rare vectors
     * take the exact scalar conversion (sinusoid_avx2.c's store4) */
    __m512 v = _mm512_insertf32x8(_mm512_castps256_ps512(fs), fc, 1);
    __m512i bits = _mm512_castps_si512(v);
    const int bf = dtype == PE_BF16;
    __mmask16 exact =
        _mm512_cmpeq_epi32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(bf ? 0xffff : 0x1fff)),
                                _mm512_set1_epi32(bf ? 0x8000 : 0x1000));
    if (!bf)
        exact |= _mm512_cmp_ps_mask(_mm512_abs_ps(v), _mm512_set1_ps(0x1p-14f), _CMP_LT_OQ);
    if (exact) {
        double sv[8], cv[8];
        _mm512_storeu_pd(sv, vs);
        _mm512_storeu_pd(cv, vc);
        for (int k = 0; k < 8; ++k)
            pe_sinusoid_store1(row, j + k, half, layout, dtype, sv[k], cv[k]);
        return;
    }
    uint16_t *o = (uint16_t *)row;
    if (layout == PE_INTERLEAVED)
        v = interleave16(v);
    __m256i h = pe_half16_from_ps(v, dtype);
    if (layout == PE_INTERLEAVED) {
        _mm256_storeu_si256((__m256i *)(o + 2 * j), h);
    } else {
        _mm_storeu_si128((__m128i *)(o + j), _mm256_castsi256_si128(h));
        _mm_storeu_si128((__m128i *)(o + half + j), _mm256_extracti128_si256(h, 1));
    }
}

/* The cell of sinusoid.c's cell_scalar, eight columns per step. */
PE_INLINE void cell_avx512(struct pe_rotor *rt, const double *pos, ptrdiff_t r0, ptrdiff_t n,
                           const double *freq, ptrdiff_t half, double wmax, char *out,
                           ptrdiff_t row_stride, const int layout, const int dtype)
{
    double m = 0.0;
    int rotate = pe_group_rotates(pe_sincos_row_avx512, rt, (const char *)(pos + r0), sizeof *pos,
                                  n, freq, half, wmax, dtype != PE_F64, &m);
    double *s = rt->s, *c = rt->c;
    for (ptrdiff_t r = 0; r < n; ++r) {
        double p = pos[r0 + r];
        char *row = out + (r0 + r) * row_stride;
        const __m512d vpos = _mm512_set1_pd(p), vm = _mm512_set1_pd(m);
        ptrdiff_t j = 0;
        if (!rotate || r == 0) {
            for (; j + 8 <= half; j += 8) {
                __m512d vs, vc;
                pe_sincos8(_mm512_mul_pd(vpos, _mm512_loadu_pd(freq + j)), &vs, &vc);
                _mm512_storeu_pd(s + j, vs);
                _mm512_storeu_pd(c + j, vc);
                store8(row, j, half, layout, dtype, vs, vc);
            }
            for (; j < half; ++j) {
                pe_sincos1(p * freq[j], &s[j], &c[j]);
                pe_sinusoid_store1(row, j, half, layout, dtype, s[j], c[j]);
            }
            continue;
        }
        for (; j + 8 <= half; j += 8) {
            __m512d vs = _mm512_loadu_pd(s + j), vc = _mm512_loadu_pd(c + j);
            pe_rotate8(&vs, &vc, _mm512_loadu_pd(rt->sd + j), _mm512_loadu_pd(rt->cd + j),
                       _mm512_loadu_pd(freq + j), vm, vpos);
            _mm512_storeu_pd(s + j, vs);
            _mm512_storeu_pd(c + j, vc);
            store8(row, j, half, layout, dtype, vs, vc);
        }
        pe_sinusoid_rotate_tail(row, j, half, s, c, rt->sd, rt->cd, freq, m, p, layout, dtype);
    }
}

PE_SPECIALISE(const pe_sinusoid_cell_fn, pe_sinusoid_cell_avx512, cell_avx512,
              PE_SINUSOID_CELL_PARAMS, PE_SINUSOID_CELL_ARGS);

PE_AVX512_END
#endif
