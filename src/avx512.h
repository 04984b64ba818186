/*
 * avx512.h -- included by the *_avx512.c and *_avx512bf16.c files only,
 * after their other headers: turns on the AVX-512 target (F, DQ, BW, VL
 * with AVX2, FMA and F16C; AVX-512 BF16 too where the file defines
 * PE_AVX512_BF16 before including it) for the rest of the file, as avx2.h
 * does for AVX2 (GCC's target pragma, clang's and clang-cl's attribute
 * pragma, nothing for MSVC; PE_AVX512_END at the end of the file), so no
 * other file needs AVX-512 and no global flag is passed.  Also the inline
 * helpers those files share: the steps of pe_sincos1 on eight doubles
 * (pe_sincos8), the rotation of eight columns (pe_rotate8, as pe_rotate1),
 * in the order of operations of sincos.h, so the same bits.
 */
#ifndef PE_AVX512_H
#define PE_AVX512_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "simd.h"
#include "sincos.h"

#if PE_X86
#include <immintrin.h>

/* The target strings are written out: GCC does not expand macros in its
 * target pragma. */
#if defined(__clang__) && defined(PE_AVX512_BF16) /* clang, and clang-cl */
#pragma clang attribute push(                                                                      \
    __attribute__((target("avx2,fma,f16c,avx512f,avx512dq,avx512bw,avx512vl,avx512bf16"))),        \
    apply_to = function)
#define PE_AVX512_END _Pragma("clang attribute pop")
#elif defined(__clang__)
#pragma clang attribute push(                                                                      \
    __attribute__((target("avx2,fma,f16c,avx512f,avx512dq,avx512bw,avx512vl"))),                   \
    apply_to = function)
#define PE_AVX512_END _Pragma("clang attribute pop")
#elif defined(_MSC_VER)
/* MSVC compiles any intrinsic for any target: nothing to turn on */
#define PE_AVX512_END
#elif defined(PE_AVX512_BF16)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512dq,avx512bw,avx512vl,avx512bf16")
#define PE_AVX512_END _Pragma("GCC pop_options")
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512dq,avx512bw,avx512vl")
#define PE_AVX512_END _Pragma("GCC pop_options")
#endif

/* The lanes of x at or past PE_REDUCE_MAX (or NaN), through the C library,
 * as pe_sincos1 does them; out of line, it almost never runs. */
PE_NOINLINE void pe_sincos8_large(__m512d x, __m512d *sp, __m512d *cp)
{
    double xv[8], sv[8], cv[8];
    _mm512_storeu_pd(xv, x);
    _mm512_storeu_pd(sv, *sp);
    _mm512_storeu_pd(cv, *cp);
    for (int k = 0; k < 8; ++k)
        if (!(fabs(xv[k]) < PE_REDUCE_MAX)) {
            sv[k] = sin(xv[k]);
            cv[k] = cos(xv[k]);
        }
    *sp = _mm512_loadu_pd(sv);
    *cp = _mm512_loadu_pd(cv);
}

/* The steps of pe_sincos1 on eight doubles (avx2.h's pe_sincos4, twice as
 * wide, the quadrant's selects as masks). */
static inline void pe_sincos8(__m512d x, __m512d *sp, __m512d *cp)
{
    const __m512i one = _mm512_set1_epi64(1), two = _mm512_set1_epi64(2);
    __m512d nq = _mm512_roundscale_pd(_mm512_mul_pd(x, _mm512_set1_pd(PE_2_OVER_PI)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512d r = _mm512_fnmadd_pd(nq, _mm512_set1_pd(PE_PIO2_1), x);
    r = _mm512_fnmadd_pd(nq, _mm512_set1_pd(PE_PIO2_2), r);
    r = _mm512_fnmadd_pd(nq, _mm512_set1_pd(PE_PIO2_3), r);

    __m512d z = _mm512_mul_pd(r, r);
    __m512d ps = _mm512_fmadd_pd(z, _mm512_set1_pd(PE_S6), _mm512_set1_pd(PE_S5));
    ps = _mm512_fmadd_pd(z, ps, _mm512_set1_pd(PE_S4));
    ps = _mm512_fmadd_pd(z, ps, _mm512_set1_pd(PE_S3));
    ps = _mm512_fmadd_pd(z, ps, _mm512_set1_pd(PE_S2));
    ps = _mm512_fmadd_pd(z, ps, _mm512_set1_pd(PE_S1));
    __m512d sv = _mm512_fmadd_pd(_mm512_mul_pd(r, z), ps, r);

    __m512d pc = _mm512_fmadd_pd(z, _mm512_set1_pd(PE_C6), _mm512_set1_pd(PE_C5));
    pc = _mm512_fmadd_pd(z, pc, _mm512_set1_pd(PE_C4));
    pc = _mm512_fmadd_pd(z, pc, _mm512_set1_pd(PE_C3));
    pc = _mm512_fmadd_pd(z, pc, _mm512_set1_pd(PE_C2));
    pc = _mm512_fmadd_pd(z, pc, _mm512_set1_pd(PE_C1));
    pc = _mm512_mul_pd(_mm512_mul_pd(z, z), pc);
    __m512d hz = _mm512_mul_pd(_mm512_set1_pd(0.5), z);
    __m512d w = _mm512_sub_pd(_mm512_set1_pd(1.0), hz);
    __m512d cv = _mm512_add_pd(
        w, _mm512_add_pd(_mm512_sub_pd(_mm512_sub_pd(_mm512_set1_pd(1.0), w), hz), pc));

    __m512i q = _mm512_castpd_si512(_mm512_add_pd(nq, _mm512_set1_pd(PE_ROUND_MAGIC)));
    __mmask8 swap = _mm512_test_epi64_mask(q, one);
    __m512d sign_s = _mm512_castsi512_pd(_mm512_slli_epi64(_mm512_and_si512(q, two), 62));
    __m512d sign_c =
        _mm512_castsi512_pd(_mm512_slli_epi64(_mm512_and_si512(_mm512_add_epi64(q, one), two), 62));
    *sp = _mm512_xor_pd(_mm512_mask_blend_pd(swap, sv, cv), sign_s);
    *cp = _mm512_xor_pd(_mm512_mask_blend_pd(swap, cv, sv), sign_c);
    __m512d ax = _mm512_abs_pd(x);
    if (_mm512_cmp_pd_mask(ax, _mm512_set1_pd(PE_REDUCE_MAX), _CMP_NLT_UQ))
        pe_sincos8_large(x, sp, cp);
}

/* Eight columns at once: (*s, *c) rotated by (sd, cd), w the frequencies,
 * vm and vpos m and pos in every lane (pe_rotate1's steps, pe_rotate4's
 * order). */
PE_INLINE void pe_rotate8(__m512d *s, __m512d *c, __m512d sd, __m512d cd, __m512d w, __m512d vm,
                          __m512d vpos)
{
    const __m512d neg = _mm512_set1_pd(-0.0);
    __m512d s0 = *s, c0 = *c;
    __m512d floor = _mm512_add_pd(_mm512_mul_pd(vm, w), _mm512_set1_pd(0x1p-20));
    __m512d s1 = _mm512_fmadd_pd(s0, cd, _mm512_mul_pd(c0, sd));
    __m512d c1 = _mm512_fmadd_pd(c0, cd, _mm512_xor_pd(_mm512_mul_pd(s0, sd), neg));
    __mmask8 low = _mm512_cmp_pd_mask(_mm512_abs_pd(s1), floor, _CMP_LT_OQ) |
                   _mm512_cmp_pd_mask(_mm512_abs_pd(c1), floor, _CMP_LT_OQ);
    if (low) { /* as pe_rotate1: those lanes directly */
        __m512d se, ce;
        pe_sincos8(_mm512_mul_pd(vpos, w), &se, &ce);
        s1 = _mm512_mask_blend_pd(low, s1, se);
        c1 = _mm512_mask_blend_pd(low, c1, ce);
    }
    *s = s1;
    *c = c1;
}

#endif /* PE_X86 */

#endif
