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

/* Eight columns at once: (*s, *c) rotated by (sd, cd), w the frequencies, vm
 * and vpos m and pos in every lane (pe_rotate1's steps, pe_rotate4's
 * order). */
PE_INLINE void pe_rotate8(__m512d *s, __m512d *c, __m512d sd, __m512d cd, __m512d w, __m512d vm,
                          __m512d vpos)
{
    const __m512d neg = _mm512_set1_pd(-0.0);
    __m512d s0 = *s, c0 = *c;
    __m512d floor = _mm512_add_pd(_mm512_mul_pd(vm, w), _mm512_set1_pd(0x1p-20));
    __m512d s1 = _mm512_fmadd_pd(s0, cd, _mm512_mul_pd(c0, sd));
    __m512d c1 = _mm512_fmadd_pd(c0, cd, _mm512_xor_pd(_mm512_mul_pd(s0, sd), neg));
    /* |s1| < floor or |c1| < floor: the smaller magnitude of the two
     * (VRANGEPD, imm 0x0A: min(|s1|, |c1|), sign cleared) below the floor;
     * s1 and c1 are finite, rotated from finite values */
    __mmask8 low = _mm512_cmp_pd_mask(_mm512_range_pd(s1, c1, 0x0A), floor, _CMP_LT_OQ);
    if (low) { /* as pe_rotate1: those lanes directly */
        __m512d se, ce;
        pe_sincos8(_mm512_mul_pd(vpos, w), &se, &ce);
        s1 = _mm512_mask_blend_pd(low, s1, se);
        c1 = _mm512_mask_blend_pd(low, c1, ce);
    }
    *s = s1;
    *c = c1;
}

/* A name of the AVX-512 table a file defines: name_avx512, or
 * name_avx512_bf16 in a file compiled with AVX-512 BF16. */
#if defined(PE_AVX512_BF16)
#define PE_AVX512_NAME(name) name##_avx512_bf16
#else
#define PE_AVX512_NAME(name) name##_avx512
#endif

/* ---- 16-bit elements, sixteen at a time ---- */

/* Sixteen float16 or bfloat16 elements (enum pe_dtype) widened to float32. */
PE_INLINE __m512 pe_ps_from_half16(__m256i h, const int dtype)
{
    if (dtype == PE_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

/* The bits of each float rounded to bfloat16 in the top half of its word
 * (avx2.h's pe_bf16_rounded): plus half a bfloat16 spacing, less one unless
 * the kept part is odd; NaN lanes made quiet instead, their sign and top
 * payload bits kept. */
PE_INLINE __m512i pe_bf16_rounded16(__m512 v)
{
    __m512i x = _mm512_castps_si512(v);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(x, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)));
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    if (nan)
        r = _mm512_mask_or_epi32(r, nan, x, _mm512_set1_epi32(0x400000));
    return r;
}

#if defined(PE_AVX512_BF16)
/* VCVTNEPS2BF16 rounds as pe_bf16_from_f32 does (to nearest even, a NaN
 * made quiet with its sign and top payload bits) but takes a subnormal
 * float as zero: a vector holding one (rare) goes the integer way.  Returns
 * whether it converted v (into *h). */
PE_INLINE int pe_bf16_convert16(__m512 v, __m256i *h)
{
    if (_mm512_fpclass_ps_mask(v, 0x20)) /* 0x20: subnormal */
        return 0;
    __m256bh b = _mm512_cvtneps_pbh(v);
    memcpy(h, &b, sizeof *h); /* the same 32 bytes, as an integer vector */
    return 1;
}
#endif

/* Sixteen floats rounded to float16 or bfloat16, as pe_f16_from_f32 and
 * pe_bf16_from_f32 round each (half.h). */
PE_INLINE __m256i pe_half16_from_ps(__m512 v, const int dtype)
{
    if (dtype != PE_BF16)
        return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
#if defined(PE_AVX512_BF16)
    __m256i h;
    if (pe_bf16_convert16(v, &h))
        return h;
#endif
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(pe_bf16_rounded16(v), 16));
}

/* Sixteen float32 values rounded to the scores' type and widened back
 * (pe_row_add's PE_ROW_PRODUCT); float32 as they are. */
PE_INLINE __m512 pe_round16(__m512 x, const int dtype)
{
    if (dtype == PE_F32)
        return x;
#if !defined(PE_AVX512_BF16)
    if (dtype == PE_BF16)
        return _mm512_castsi512_ps(
            _mm512_and_si512(pe_bf16_rounded16(x), _mm512_set1_epi32((int)0xffff0000u)));
#endif
    return pe_ps_from_half16(pe_half16_from_ps(x, dtype), dtype);
}

/* pe_row_add on the AVX-512 path: eight doubles, sixteen floats or sixteen
 * float16 or bfloat16 scores at a time, each sum as pe_row_add makes it,
 * the rest by pe_row_add. */
PE_INLINE void pe_row_add_simd512(char *o, const char *x, ptrdiff_t n, const int kind,
                                  const int dtype)
{
    const ptrdiff_t isz = (ptrdiff_t)pe_itemsize(dtype);
    const ptrdiff_t xsz = kind == PE_ROW_SAME || dtype == PE_F64 ? isz : 4;
    ptrdiff_t j = 0;
    if (dtype == PE_F64) {
        double *d = (double *)o;
        const double *s = (const double *)x;
        for (; j + 8 <= n; j += 8) {
            __m512d v = _mm512_loadu_pd(s + j);
            _mm512_storeu_pd(d + j,
                             kind == PE_ROW_CAST ? v : _mm512_add_pd(_mm512_loadu_pd(d + j), v));
        }
    } else if (dtype == PE_F32) {
        float *d = (float *)o;
        const float *s = (const float *)x;
        for (; j + 16 <= n; j += 16) {
            __m512 v = _mm512_loadu_ps(s + j);
            _mm512_storeu_ps(d + j,
                             kind == PE_ROW_CAST ? v : _mm512_add_ps(_mm512_loadu_ps(d + j), v));
        }
    } else if (kind == PE_ROW_SAME) {
        const uint16_t *s = (const uint16_t *)x;
        uint16_t *d = (uint16_t *)o;
        for (; j + 16 <= n; j += 16) {
            __m512 a = pe_ps_from_half16(_mm256_loadu_si256((const __m256i *)(d + j)), dtype);
            __m512 b = pe_ps_from_half16(_mm256_loadu_si256((const __m256i *)(s + j)), dtype);
            _mm256_storeu_si256((__m256i *)(d + j), pe_half16_from_ps(_mm512_add_ps(a, b), dtype));
        }
    } else {
        const float *s = (const float *)x;
        uint16_t *d = (uint16_t *)o;
        for (; j + 16 <= n; j += 16) {
            __m512 v = _mm512_loadu_ps(s + j);
            if (kind == PE_ROW_PRODUCT)
                v = pe_round16(v, dtype);
            if (kind != PE_ROW_CAST)
                v = _mm512_add_ps(
                    pe_ps_from_half16(_mm256_loadu_si256((const __m256i *)(d + j)), dtype), v);
            _mm256_storeu_si256((__m256i *)(d + j), pe_half16_from_ps(v, dtype));
        }
    }
    pe_row_add(o + j * isz, x + j * xsz, n - j, kind, dtype);
}

#endif /* PE_X86 */

#endif
