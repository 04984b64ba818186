/*
 * sincos.c -- rows of sin and cos of pos * freq[i] in float64.
 *
 * Every table posenc writes (sinusoid, RoPE cos/sin) is a row of sin and cos
 * of the same angles.  One range reduction serves both, and a vector of four
 * doubles does four angles per step, so the tables are bound by the stores,
 * not by the C library's scalar sin() and cos().  The arithmetic is in
 * sincos.h.
 */
#include "pe.h"
#include "sincos.h"

static void sincos_row_scalar(double pos, const double *freq, ptrdiff_t n, double *s, double *c)
{
    for (ptrdiff_t i = 0; i < n; ++i)
        pe_sincos1(pos * freq[i], &s[i], &c[i]);
}

#if PE_X86
PE_TARGET_AVX2 static void sincos_row_avx2(double pos, const double *freq, ptrdiff_t n, double *s,
                                           double *c)
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
#endif

void pe_sincos_row(double pos, const double *freq, ptrdiff_t n, double *s, double *c)
{
#if PE_X86
    if (pe_use_avx2()) {
        sincos_row_avx2(pos, freq, n, s, c);
        return;
    }
#endif
    sincos_row_scalar(pos, freq, n, s, c);
}
