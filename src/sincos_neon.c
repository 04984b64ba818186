/*
 * sincos_neon.c -- the rows of sincos.c, two columns per step: the same
 * arithmetic as pe_sincos1 and pe_rotate1 (pe_sincos2, pe_rotate2 in
 * neon.h), so the same bits.
 */
#include "pe.h"
#include "simd.h"
#include "sincos.h"

#include "neon.h"

#if PE_ARM
void pe_sincos_row_neon(double pos, const double *freq, ptrdiff_t n, double *s, double *c)
{
    ptrdiff_t i = 0;
    for (; i + 2 <= n; i += 2)
        pe_sincos2(pos, freq + i, s + i, c + i);
    for (; i < n; ++i)
        pe_sincos1(pos * freq[i], &s[i], &c[i]);
}

void pe_rotate_row_neon(double *s, double *c, const double *sd, const double *cd,
                        const double *freq, double pos, double m, ptrdiff_t n)
{
    ptrdiff_t i = 0;
    for (; i + 2 <= n; i += 2)
        pe_rotate2(s + i, c + i, vld1q_f64(sd + i), vld1q_f64(cd + i), vld1q_f64(freq + i), m, pos);
    for (; i < n; ++i)
        pe_rotate1(&s[i], &c[i], sd[i], cd[i], freq[i], m, pos);
}
#endif
