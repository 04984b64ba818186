/*
 * sincos.h -- sine and cosine of a float64 angle, both at once, as inline
 * functions for the kernels that make tables (sinusoid.c, rope.c).
 *
 * Precision: the angle (a float64 product pos * freq) is reduced by
 * n * pi/2 with pi/2 split into three doubles and FMA: the first step is
 * exact (both terms are multiples of 2**-53 and the difference is below 1),
 * so the remainder carries ~1 ulp of error for any angle below 2**50 (far
 * past 2**24 positions).  The
 * polynomials on [-pi/4, pi/4] are the classic minimax ones (error below
 * 2**-58).  The results are within ~1.5 ulp of sin and cos of the float64
 * angle, so float32 values rounded from them are within 1 ulp of it.
 *
 * The scalar function is written with fma() in the order of the vector one,
 * so both paths give the same bits.
 */
#ifndef PE_SINCOS_H
#define PE_SINCOS_H

#include <math.h>
#include <stdint.h>

#include "simd.h"

#define PE_2_OVER_PI 0x1.45f306dc9c883p-1
#define PE_PIO2_1 0x1.921fb54442d18p+0
#define PE_PIO2_2 0x1.1a62633145c07p-54
#define PE_PIO2_3 -0x1.f1976b7ed8fbcp-110
/* 1.5 * 2**52: adding it puts an integer-valued double's low bits, in two's
 * complement, in the low bits of the mantissa. */
#define PE_ROUND_MAGIC 0x1.8p52

static const double PE_S1 = -1.66666666666666324348e-01, PE_S2 = 8.33333333332248946124e-03,
                    PE_S3 = -1.98412698298579493134e-04, PE_S4 = 2.75573137070700676789e-06,
                    PE_S5 = -2.50507602534068634195e-08, PE_S6 = 1.58969099521155010221e-10;
static const double PE_C1 = 4.16666666666666019037e-02, PE_C2 = -1.38888888888741095749e-03,
                    PE_C3 = 2.48015872894767294178e-05, PE_C4 = -2.75573143513906633035e-07,
                    PE_C5 = 2.08757232129817482790e-09, PE_C6 = -1.13596475577881948265e-11;

/* Below this the reduction is exact and the quadrant trick holds.  Larger
 * angles (positions past 10**15 or so, or a non-finite angle) go to the C
 * library's sin and cos, which reduce any argument correctly. */
#define PE_REDUCE_MAX 0x1p50

static inline void pe_sincos1(double x, double *sp, double *cp)
{
    if (!(fabs(x) < PE_REDUCE_MAX)) {
        *sp = sin(x);
        *cp = cos(x);
        return;
    }
    double n = nearbyint(x * PE_2_OVER_PI);
    double r = fma(-n, PE_PIO2_1, x);
    r = fma(-n, PE_PIO2_2, r);
    r = fma(-n, PE_PIO2_3, r);

    double z = r * r;
    double ps = fma(z, fma(z, fma(z, fma(z, fma(z, PE_S6, PE_S5), PE_S4), PE_S3), PE_S2), PE_S1);
    double s = fma(r * z, ps, r);
    double pc = fma(z, fma(z, fma(z, fma(z, fma(z, PE_C6, PE_C5), PE_C4), PE_C3), PE_C2), PE_C1);
    pc = (z * z) * pc;
    double hz = 0.5 * z, w = 1.0 - hz;
    double c = w + (((1.0 - w) - hz) + pc);

    /* quadrant from the low two bits of n */
    union {
        double d;
        uint64_t u;
    } q = {n + PE_ROUND_MAGIC};
    unsigned quad = (unsigned)(q.u & 3u);
    double sv = (quad & 1u) ? c : s, cv = (quad & 1u) ? s : c;
    *sp = (quad & 2u) ? -sv : sv;
    *cp = ((quad + 1u) & 2u) ? -cv : cv;
}

#if PE_X86
/* The lanes of x at or past PE_REDUCE_MAX (or NaN), through the C library,
 * as pe_sincos1 does them; kept out of line, it almost never runs. */
PE_TARGET_AVX2 static __attribute__((noinline)) void pe_sincos4_large(__m256d x, __m256d *sp,
                                                                      __m256d *cp)
{
    double xv[4], sv[4], cv[4];
    _mm256_storeu_pd(xv, x);
    _mm256_storeu_pd(sv, *sp);
    _mm256_storeu_pd(cv, *cp);
    for (int k = 0; k < 4; ++k)
        if (!(fabs(xv[k]) < PE_REDUCE_MAX)) {
            sv[k] = sin(xv[k]);
            cv[k] = cos(xv[k]);
        }
    *sp = _mm256_loadu_pd(sv);
    *cp = _mm256_loadu_pd(cv);
}

/* The same steps on four doubles. */
PE_TARGET_AVX2 static inline void pe_sincos4(__m256d x, __m256d *sp, __m256d *cp)
{
    const __m256i one = _mm256_set1_epi64x(1), two = _mm256_set1_epi64x(2);
    __m256d nq = _mm256_round_pd(_mm256_mul_pd(x, _mm256_set1_pd(PE_2_OVER_PI)),
                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256d r = _mm256_fnmadd_pd(nq, _mm256_set1_pd(PE_PIO2_1), x);
    r = _mm256_fnmadd_pd(nq, _mm256_set1_pd(PE_PIO2_2), r);
    r = _mm256_fnmadd_pd(nq, _mm256_set1_pd(PE_PIO2_3), r);

    __m256d z = _mm256_mul_pd(r, r);
    __m256d ps = _mm256_fmadd_pd(z, _mm256_set1_pd(PE_S6), _mm256_set1_pd(PE_S5));
    ps = _mm256_fmadd_pd(z, ps, _mm256_set1_pd(PE_S4));
    ps = _mm256_fmadd_pd(z, ps, _mm256_set1_pd(PE_S3));
    ps = _mm256_fmadd_pd(z, ps, _mm256_set1_pd(PE_S2));
    ps = _mm256_fmadd_pd(z, ps, _mm256_set1_pd(PE_S1));
    __m256d sv = _mm256_fmadd_pd(_mm256_mul_pd(r, z), ps, r);

    __m256d pc = _mm256_fmadd_pd(z, _mm256_set1_pd(PE_C6), _mm256_set1_pd(PE_C5));
    pc = _mm256_fmadd_pd(z, pc, _mm256_set1_pd(PE_C4));
    pc = _mm256_fmadd_pd(z, pc, _mm256_set1_pd(PE_C3));
    pc = _mm256_fmadd_pd(z, pc, _mm256_set1_pd(PE_C2));
    pc = _mm256_fmadd_pd(z, pc, _mm256_set1_pd(PE_C1));
    pc = _mm256_mul_pd(_mm256_mul_pd(z, z), pc);
    __m256d hz = _mm256_mul_pd(_mm256_set1_pd(0.5), z);
    __m256d w = _mm256_sub_pd(_mm256_set1_pd(1.0), hz);
    __m256d cv = _mm256_add_pd(
        w, _mm256_add_pd(_mm256_sub_pd(_mm256_sub_pd(_mm256_set1_pd(1.0), w), hz), pc));

    __m256i q = _mm256_castpd_si256(_mm256_add_pd(nq, _mm256_set1_pd(PE_ROUND_MAGIC)));
    __m256d swap = _mm256_castsi256_pd(_mm256_cmpeq_epi64(_mm256_and_si256(q, one), one));
    __m256d sign_s = _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_and_si256(q, two), 62));
    __m256d sign_c =
        _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_and_si256(_mm256_add_epi64(q, one), two), 62));
    __m256d so = _mm256_xor_pd(_mm256_blendv_pd(sv, cv, swap), sign_s);
    __m256d co = _mm256_xor_pd(_mm256_blendv_pd(cv, sv, swap), sign_c);
    *sp = so;
    *cp = co;
    __m256d ax = _mm256_andnot_pd(_mm256_set1_pd(-0.0), x);
    if (_mm256_movemask_pd(_mm256_cmp_pd(ax, _mm256_set1_pd(PE_REDUCE_MAX), _CMP_NLT_UQ)))
        pe_sincos4_large(x, sp, cp);
}

#endif

/* ---- rotation of a row from the previous one (the anchor grid) ----
 *
 * (s, c) at angle a becomes (s, c) at a + d, given sd, cd = sin, cos of d:
 * one product and one FMA each, in the same order on both paths (so the
 * same bits).  A result below floor = m * w + 2**-20 (m: M 2**-26 for the
 * largest |position| M of the group, w: the frequency) carries too large a
 * relative error for a float32 ulp and is recomputed from the angle pos * w
 * directly.  These two are the only definition of that arithmetic: the
 * rows of pe_sincos_rotate_row and sinusoid's fused stores call them. */

static inline void pe_rotate1(double *s, double *c, double sd, double cd, double w, double m,
                              double pos)
{
    double s0 = *s, c0 = *c, floor = m * w + 0x1p-20;
    double s1 = fma(s0, cd, c0 * sd), c1 = fma(c0, cd, -(s0 * sd));
    if (fabs(s1) < floor || fabs(c1) < floor)
        pe_sincos1(pos * w, &s1, &c1);
    *s = s1;
    *c = c1;
}

#if PE_X86
/* Four columns at once: (*s, *c) rotated by (sd, cd), w the frequencies, vm
 * and vpos m and pos in every lane. */
PE_TARGET_AVX2 static inline __attribute__((always_inline)) void
pe_rotate4(__m256d *s, __m256d *c, __m256d sd, __m256d cd, __m256d w, __m256d vm, __m256d vpos)
{
    const __m256d neg = _mm256_set1_pd(-0.0);
    __m256d s0 = *s, c0 = *c;
    __m256d floor = _mm256_add_pd(_mm256_mul_pd(vm, w), _mm256_set1_pd(0x1p-20));
    __m256d s1 = _mm256_fmadd_pd(s0, cd, _mm256_mul_pd(c0, sd));
    __m256d c1 = _mm256_fmadd_pd(c0, cd, _mm256_xor_pd(_mm256_mul_pd(s0, sd), neg));
    __m256d low = _mm256_or_pd(_mm256_cmp_pd(_mm256_andnot_pd(neg, s1), floor, _CMP_LT_OQ),
                               _mm256_cmp_pd(_mm256_andnot_pd(neg, c1), floor, _CMP_LT_OQ));
    if (_mm256_movemask_pd(low)) { /* as pe_rotate1: those lanes directly */
        __m256d se, ce;
        pe_sincos4(_mm256_mul_pd(vpos, w), &se, &ce);
        s1 = _mm256_blendv_pd(s1, se, low);
        c1 = _mm256_blendv_pd(c1, ce, low);
    }
    *s = s1;
    *c = c1;
}
#endif

#endif
