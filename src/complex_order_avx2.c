/*
 * complex_order_avx2.c -- complex-order embeddings (complex_order.h), the
 * AVX2 rows: four elements per step, loaded from float16, float32 or
 * float64 tables, the phase (product, then sum), pe_sincos4 and the
 * products as pe_co_tail forms them, so the same bits; float32 and float64
 * parts stored four at a time, float16 ones each rounded once from its
 * float64 value (as pe_store does: through float32 would round twice).
 */
#include "complex_order.h"

#include "pe.h"
#include "simd.h"

#include "avx2.h"

#if PE_X86
/* Four elements from i of a row of dtype as doubles (exact). */
PE_INLINE __m256d co_load4(const char *row, ptrdiff_t i, const int dtype)
{
    if (dtype == PE_F64)
        return _mm256_loadu_pd((const double *)row + i);
    if (dtype == PE_F32)
        return _mm256_cvtps_pd(_mm_loadu_ps((const float *)row + i));
    return _mm256_cvtps_pd(
        _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)((const uint16_t *)row + i))));
}

/* Whether a bit of x is set. */
PE_INLINE int co_any(__m256d x)
{
    const __m256i b = _mm256_castpd_si256(x);
    return !_mm256_testz_si256(b, b);
}

/* Elements [0, i0) of token t's parts, i0 the largest multiple of 4 up to
 * dim (bfloat16, which the tables never are: none). */
PE_INLINE void co_head_avx2(const struct pe_complex_order *c, ptrdiff_t t, ptrdiff_t *i0,
                            unsigned *bad, const int interleaved, const int dtype)
{
    if (dtype == PE_BF16)
        return;
    const ptrdiff_t id = (ptrdiff_t)c->ids[t], dim = c->dim;
    const ptrdiff_t item = (ptrdiff_t)pe_itemsize(dtype);
    const char *ra = c->amp + id * c->amp_stride, *rw = c->freq + id * c->freq_stride,
               *rp = c->phase + id * c->phase_stride;
    char *ore = c->re + t * (interleaved ? 2 : 1) * dim * item, *oim = c->im + t * dim * item;
    const __m256d vp = _mm256_set1_pd(c->pos[t]);
    __m256d ba = _mm256_setzero_pd(), bw = ba, bp = ba;
    ptrdiff_t i = 0;
    for (; i + 4 <= dim; i += 4) {
        const __m256d a = co_load4(ra, i, dtype), w = co_load4(rw, i, dtype),
                      th = co_load4(rp, i, dtype);
        ba = _mm256_or_pd(ba, _mm256_sub_pd(a, a));
        bw = _mm256_or_pd(bw, _mm256_sub_pd(w, w));
        bp = _mm256_or_pd(bp, _mm256_sub_pd(th, th));
        __m256d s, co;
        pe_sincos4(_mm256_add_pd(_mm256_mul_pd(vp, w), th), &s, &co);
        const __m256d re = _mm256_mul_pd(a, co), im = _mm256_mul_pd(a, s);
        if (dtype == PE_F64 && interleaved) {
            const __m256d lo = _mm256_unpacklo_pd(re, im), hi = _mm256_unpackhi_pd(re, im);
            _mm256_storeu_pd((double *)ore + 2 * i, _mm256_permute2f128_pd(lo, hi, 0x20));
            _mm256_storeu_pd((double *)ore + 2 * i + 4, _mm256_permute2f128_pd(lo, hi, 0x31));
        } else if (dtype == PE_F64) {
            _mm256_storeu_pd((double *)ore + i, re);
            _mm256_storeu_pd((double *)oim + i, im);
        } else if (dtype == PE_F32 && interleaved) {
            const __m128 r4 = _mm256_cvtpd_ps(re), i4 = _mm256_cvtpd_ps(im);
            _mm_storeu_ps((float *)ore + 2 * i, _mm_unpacklo_ps(r4, i4));
            _mm_storeu_ps((float *)ore + 2 * i + 4, _mm_unpackhi_ps(r4, i4));
        } else if (dtype == PE_F32) {
            _mm_storeu_ps((float *)ore + i, _mm256_cvtpd_ps(re));
            _mm_storeu_ps((float *)oim + i, _mm256_cvtpd_ps(im));
        } else {
            double rv[4], iv[4];
            _mm256_storeu_pd(rv, re);
            _mm256_storeu_pd(iv, im);
            for (int l = 0; l < 4; ++l) {
                if (interleaved) {
                    pe_store(ore, 2 * (i + l), dtype, rv[l]);
                    pe_store(ore, 2 * (i + l) + 1, dtype, iv[l]);
                } else {
                    pe_store(ore, i + l, dtype, rv[l]);
                    pe_store(oim, i + l, dtype, iv[l]);
                }
            }
        }
    }
    *bad |= (co_any(ba) ? PE_CO_BAD_AMP : 0u) | (co_any(bw) ? PE_CO_BAD_FREQ : 0u) |
            (co_any(bp) ? PE_CO_BAD_PHASE : 0u);
    *i0 = i;
}

PE_CO_ROWS_TABLE(pe_complex_order_rows_avx2, co_head_avx2);

PE_AVX2_END
#endif
