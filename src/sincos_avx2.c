/*
 * sincos_avx2.c -- the rows of sincos.c, four columns per step: the same
 * arithmetic as pe_sincos1 and pe_rotate1 (pe_sincos4, pe_rotate4 in
 * avx2.h), so the same bits.
 */
#include "pe.h"
#include "simd.h"
#include "sincos.h"

#include "avx2.h"

#if PE_X86
void pe_sincos_row_avx2(double pos, const double *freq, ptrdiff_t n, double *s, double *c)
{
    const __m256d vpos = _mm256_set1_pd(pos);
    ptrdiff_t i = 0;
    for (; i + 4 <= n; i += 4) {
        __m256d vs, vc;
        pe_sincos4(_mm256_mul_pd(vpos, _mm256_loadu_pd(freq + i)), &vs, &vc);
        _mm256_storeu_pd(s + i, vs);
        _mm256_storeu_pd(c + i, vc);
    }
    for (; i < n; ++i)
        pe_sincos1(pos * freq[i], &s[i], &c[i]);
}

void pe_rotate_row_avx2(double *s, double *c, const double *sd, const double *cd,
                        const double *freq, double pos, double m, ptrdiff_t n)
{
    const __m256d vm = _mm256_set1_pd(m), vpos = _mm256_set1_pd(pos);
    ptrdiff_t i = 0;
    for (; i + 4 <= n; i += 4) {
        __m256d vs = _mm256_loadu_pd(s + i), vc = _mm256_loadu_pd(c + i);
        pe_rotate4(&vs, &vc, _mm256_loadu_pd(sd + i), _mm256_loadu_pd(cd + i),
                   _mm256_loadu_pd(freq + i), vm, vpos);
        _mm256_storeu_pd(s + i, vs);
        _mm256_storeu_pd(c + i, vc);
    }
    for (; i < n; ++i)
        pe_rotate1(&s[i], &c[i], sd[i], cd[i], freq[i], m, pos);
}

PE_AVX2_END
#endif
