/*
 * sincos_avx512.c -- the rows of sincos.c, eight columns per step: the
 * same arithmetic as pe_sincos1 and pe_rotate1 (pe_sincos8, pe_rotate8 in
 * avx512.h), so the same bits.
 */
#include "pe.h"
#include "simd.h"
#include "sincos.h"

#include "avx512.h"

#if PE_X86
void pe_sincos_row_avx512(double pos, const double *freq, ptrdiff_t n, double *s, double *c)
{
    const __m512d vpos = _mm512_set1_pd(pos);
    ptrdiff_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m512d vs, vc;
        pe_sincos8(_mm512_mul_pd(vpos, _mm512_loadu_pd(freq + i)), &vs, &vc);
        _mm512_storeu_pd(s + i, vs);
        _mm512_storeu_pd(c + i, vc);
    }
    for (; i < n; ++i)
        pe_sincos1(pos * freq[i], &s[i], &c[i]);
}

void pe_rotate_row_avx512(double *s, double *c, const double *sd, const double *cd,
                          const double *freq, double pos, double m, ptrdiff_t n)
{
    const __m512d vm = _mm512_set1_pd(m), vpos = _mm512_set1_pd(pos);
    ptrdiff_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m512d vs = _mm512_loadu_pd(s + i), vc = _mm512_loadu_pd(c + i);
        pe_rotate8(&vs, &vc, _mm512_loadu_pd(sd + i), _mm512_loadu_pd(cd + i),
                   _mm512_loadu_pd(freq + i), vm, vpos);
        _mm512_storeu_pd(s + i, vs);
        _mm512_storeu_pd(c + i, vc);
    }
    for (; i < n; ++i)
        pe_rotate1(&s[i], &c[i], sd[i], cd[i], freq[i], m, pos);
}

PE_AVX512_END
#endif
