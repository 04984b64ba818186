/*
 * avx2.h -- included by the *_avx2.c files only, after their other headers:
 * turns on the AVX2+FMA+F16C target for the rest of the file (GCC's target
 * pragma, clang's and clang-cl's attribute pragma, nothing for MSVC, which
 * compiles intrinsics anywhere; PE_AVX2_END at the end of the file turns it
 * off), so the portable files carry no attributes or intrinsics and no
 * global -mavx2 is needed.  Also the inline helpers those files
 * share: sine and cosine of four doubles (pe_sincos4, the steps of
 * pe_sincos1 in sincos.h), the rotation of four columns (pe_rotate4, as
 * pe_rotate1), a copy with non-temporal stores (pe_stream_copy), and
 * 16-bit elements to and from float32: eight at a time (pe_ps_from_half8,
 * pe_half8_from_ps: F16C for float16, integer shifts and the rounding of
 * half.h for bfloat16, which AVX2 has no instruction for), and bfloat16
 * sixteen at a time as even and odd elements (pe_ps_from_bf16x16,
 * pe_bf16x16_from_ps), shifts and masks without shuffles: the kernels that
 * are memory-bound in float16 would otherwise be bound by these
 * conversions in bfloat16.
 */
#ifndef PE_AVX2_H
#define PE_AVX2_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "simd.h"
#include "sincos.h"

#if PE_X86
#include <immintrin.h>

#if defined(__clang__) /* clang, and clang-cl */
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#define PE_AVX2_END _Pragma("clang attribute pop")
#elif defined(_MSC_VER)
/* MSVC compiles any intrinsic for any target: nothing to turn on */
#define PE_AVX2_END
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#define PE_AVX2_END _Pragma("GCC pop_options")
#endif

/* The lanes of x at or past PE_REDUCE_MAX (or NaN), through the C library,
 * as pe_sincos1 does them; kept out of line, it almost never runs (and in
 * the file that calls it, the compiler knows which registers it uses). */
PE_NOINLINE void pe_sincos4_large(__m256d x, __m256d *sp, __m256d *cp)
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
static inline void pe_sincos4(__m256d x, __m256d *sp, __m256d *cp)
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

/* Four columns at once: (*s, *c) rotated by (sd, cd), w the frequencies, vm
 * and vpos m and pos in every lane. */
PE_INLINE void pe_rotate4(__m256d *s, __m256d *c, __m256d sd, __m256d cd, __m256d w, __m256d vm,
                          __m256d vpos)
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

/* The bits of each float plus half a bfloat16 spacing, less one unless the
 * kept part is odd: their top halves are the floats rounded to nearest
 * even (pe_bf16_from_f32), NaNs aside. */
PE_INLINE __m256i pe_bf16_round_up(__m256 v)
{
    __m256i x = _mm256_castps_si256(v);
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    return _mm256_add_epi32(x, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff)));
}

/* r (pe_bf16_round_up of v) with NaN lanes of v made quiet instead, their
 * top payload bits and sign kept. */
PE_INLINE __m256i pe_bf16_quiet_nans(__m256i r, __m256 v)
{
    __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    __m256 quiet = _mm256_or_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x400000)));
    return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(r), quiet, nan));
}

/* Each float rounded to bfloat16 (pe_bf16_from_f32) in the top half of its
 * word, the low half to be dropped: pe_bf16_round_up, with the NaN lanes
 * fixed (pe_bf16_quiet_nans) only where the vector holds one, as seldom. */
PE_INLINE __m256i pe_bf16_rounded(__m256 v)
{
    __m256i r = pe_bf16_round_up(v);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)))
        r = pe_bf16_quiet_nans(r, v);
    return r;
}

/* pe_bf16_rounded of a and of b, with one test for NaNs (rare, a second
 * pass) for the two. */
PE_INLINE void pe_bf16_rounded2(__m256 a, __m256 b, __m256i *ra, __m256i *rb)
{
    *ra = pe_bf16_round_up(a);
    *rb = pe_bf16_round_up(b);
    /* unordered: a NaN in either */
    if (_mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_UNORD_Q))) {
        *ra = pe_bf16_quiet_nans(*ra, a);
        *rb = pe_bf16_quiet_nans(*rb, b);
    }
}

/* Sixteen bfloat16 elements (32 bytes) widened to float32: the even ones
 * (0, 2, .., 14) in *ev, the odd ones in *od.  Each 32-bit word holds an
 * even element in its low half and the next one in its high half, so a
 * shift and a mask widen them, without shuffles. */
PE_INLINE void pe_ps_from_bf16x16(__m256i h, __m256 *ev, __m256 *od)
{
    *ev = _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
    *od = _mm256_castsi256_ps(_mm256_and_si256(h, _mm256_set1_epi32((int)0xffff0000u)));
}

/* The even and odd floats of pe_ps_from_bf16x16 rounded to bfloat16 as
 * pe_bf16_from_f32 rounds each, back in one vector of sixteen.  NaNs,
 * rare, take a second pass. */
PE_INLINE __m256i pe_bf16x16_from_ps(__m256 ev, __m256 od)
{
    __m256i re, ro;
    pe_bf16_rounded2(ev, od, &re, &ro);
    /* the even elements' top halves into the low halves of the words */
    return _mm256_blend_epi16(_mm256_srli_epi32(re, 16), ro, 0xAA);
}

/* Eight float16 or bfloat16 elements (enum pe_dtype) widened to float32. */
PE_INLINE __m256 pe_ps_from_half8(__m128i h, const int dtype)
{
    if (dtype == PE_BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

/* Eight floats rounded to float16 or bfloat16, as pe_f16_from_f32 and
 * pe_bf16_from_f32 round each (half.h). */
PE_INLINE __m128i pe_half8_from_ps(__m256 v, const int dtype)
{
    if (dtype != PE_BF16)
        return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    __m256i r = _mm256_srli_epi32(pe_bf16_rounded(v), 16); /* 0 .. 0xffff: no saturation */
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

/* ---- stores, plain or non-temporal ---- */

/* 32 bytes (eight floats, four doubles, sixteen 16-bit elements) or 16
 * bytes at p; with stream, non-temporal stores (p 16-byte aligned): an
 * output that does not fit in cache then goes to memory without being read
 * first.  The caller orders them with _mm_sfence() before it hands the
 * array back. */
PE_INLINE void pe_store_si256(void *p, __m256i v, const int stream)
{
    if (stream) {
        _mm_stream_si128((__m128i *)p, _mm256_castsi256_si128(v));
        _mm_stream_si128((__m128i *)p + 1, _mm256_extracti128_si256(v, 1));
    } else {
        _mm256_storeu_si256((__m256i *)p, v);
    }
}

PE_INLINE void pe_store_si128(void *p, __m128i v, const int stream)
{
    if (stream)
        _mm_stream_si128((__m128i *)p, v);
    else
        _mm_storeu_si128((__m128i *)p, v);
}

/* Eight floats, four doubles, or eight floats rounded to float16 or
 * bfloat16 (pe_half8_from_ps), stored as pe_store_si256 stores. */
PE_INLINE void pe_store_ps(float *p, __m256 v, const int stream)
{
    pe_store_si256(p, _mm256_castps_si256(v), stream);
}

PE_INLINE void pe_store_pd(double *p, __m256d v, const int stream)
{
    pe_store_si256(p, _mm256_castpd_si256(v), stream);
}

PE_INLINE void pe_store_h8(uint16_t *p, __m256 v, const int dtype, const int stream)
{
    pe_store_si128(p, pe_half8_from_ps(v, dtype), stream);
}

/* bytes (a multiple of 16) from src to 16-byte aligned dst, with
 * non-temporal stores. */
static inline void pe_stream_copy(char *dst, const char *src, ptrdiff_t bytes)
{
    ptrdiff_t k = 0;
    for (; k + 32 <= bytes; k += 32)
        pe_store_si256(dst + k, _mm256_loadu_si256((const __m256i *)(src + k)), 1);
    for (; k < bytes; k += 16)
        pe_store_si128(dst + k, _mm_loadu_si128((const __m128i *)(src + k)), 1);
}

/* ---- rows of scores (simd.h's pe_row_add) ---- */

/* o[0 .. 8) += x: eight scores of a 32-bit or 16-bit type and eight
 * float32 values, each sum rounded once (pe_row_add's PE_ROW_SUM). */
PE_INLINE void pe_sum8(char *o, __m256 x, const int dtype)
{
    if (dtype == PE_F32) {
        _mm256_storeu_ps((float *)o, _mm256_add_ps(_mm256_loadu_ps((const float *)o), x));
        return;
    }
    __m256 a = pe_ps_from_half8(_mm_loadu_si128((const __m128i *)o), dtype);
    _mm_storeu_si128((__m128i *)o, pe_half8_from_ps(_mm256_add_ps(a, x), dtype));
}

/* Eight float32 products rounded to the scores' type and widened back
 * (pe_row_add's PE_ROW_PRODUCT; for bfloat16 the rounded top halves kept,
 * without a pack and an unpack); float32 as they are. */
PE_INLINE __m256 pe_round8(__m256 x, const int dtype)
{
    if (dtype == PE_BF16)
        return _mm256_castsi256_ps(
            _mm256_and_si256(pe_bf16_rounded(x), _mm256_set1_epi32((int)0xffff0000u)));
    if (dtype == PE_F16)
        return pe_ps_from_half8(pe_half8_from_ps(x, dtype), dtype);
    return x;
}

/* Sixteen bfloat16 scores o[0 .. 16) += x0, x1 (eight float32 values each
 * for scores 0 .. 8 and 8 .. 16), each sum rounded once, as pe_sum8 rounds
 * it, or (store) = x0, x1 rounded as pe_half8_from_ps rounds them; with one
 * test for NaNs per rounding of sixteen and no lane-crossing narrowing:
 * unpacking the scores' words with zeros widens scores 0-3 and 8-11 (lo),
 * 4-7 and 12-15 (hi), the order packus narrows back into 0 .. 16. */
PE_INLINE void pe_bf16_sum16(char *o, __m256 x0, __m256 x1, const int store)
{
    __m256i rl, rh;
    __m256 lo = _mm256_permute2f128_ps(x0, x1, 0x20), hi = _mm256_permute2f128_ps(x0, x1, 0x31);
    if (!store) {
        const __m256i zero = _mm256_setzero_si256(), h = _mm256_loadu_si256((const __m256i *)o);
        lo = _mm256_add_ps(_mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, h)), lo);
        hi = _mm256_add_ps(_mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, h)), hi);
    }
    pe_bf16_rounded2(lo, hi, &rl, &rh);
    _mm256_storeu_si256((__m256i *)o,
                        _mm256_packus_epi32(_mm256_srli_epi32(rl, 16), _mm256_srli_epi32(rh, 16)));
}

/* pe_cast_row on the AVX2 path: eight values at a time (four doubles,
 * sixteen bfloat16 with one test for NaNs), each rounded as pe_cast_row
 * rounds it. */
PE_INLINE void pe_cast_row_simd(char *o, const char *x, ptrdiff_t n, const int dtype)
{
    const ptrdiff_t isz = (ptrdiff_t)pe_itemsize(dtype), xsz = dtype == PE_F64 ? 8 : 4;
    ptrdiff_t j = 0;
    if (dtype == PE_F64) {
        for (; j + 4 <= n; j += 4)
            _mm256_storeu_pd((double *)o + j, _mm256_loadu_pd((const double *)x + j));
    } else if (dtype == PE_F32) {
        for (; j + 8 <= n; j += 8)
            _mm256_storeu_ps((float *)o + j, _mm256_loadu_ps((const float *)x + j));
    } else {
        const float *s = (const float *)x;
        for (; dtype == PE_BF16 && j + 16 <= n; j += 16)
            pe_bf16_sum16(o + j * isz, _mm256_loadu_ps(s + j), _mm256_loadu_ps(s + j + 8), 1);
        for (; j + 8 <= n; j += 8)
            _mm_storeu_si128((__m128i *)(o + j * isz),
                             pe_half8_from_ps(_mm256_loadu_ps(s + j), dtype));
    }
    pe_cast_row(o + j * isz, x + j * xsz, n - j, dtype);
}

/* pe_row_add on the AVX2 path (pe_row_add_simd): four doubles, eight floats, eight float16
 * or sixteen bfloat16 scores at a time (bfloat16 rounding bounds its
 * time), each sum as pe_row_add makes it, the rest by pe_row_add. */
PE_INLINE void pe_row_add_simd(char *o, const char *x, ptrdiff_t n, const int kind, const int dtype)
{
    const ptrdiff_t isz = (ptrdiff_t)pe_itemsize(dtype);
    const ptrdiff_t xsz = kind == PE_ROW_SAME || dtype == PE_F64 ? isz : 4;
    ptrdiff_t j = 0;
    if (kind == PE_ROW_CAST) {
        pe_cast_row_simd(o, x, n, dtype);
        return;
    }
    if (dtype == PE_F64) {
        double *d = (double *)o;
        const double *s = (const double *)x;
        for (; j + 4 <= n; j += 4)
            _mm256_storeu_pd(d + j, _mm256_add_pd(_mm256_loadu_pd(d + j), _mm256_loadu_pd(s + j)));
    } else if (dtype == PE_F32) {
        float *d = (float *)o;
        const float *s = (const float *)x;
        for (; j + 8 <= n; j += 8)
            _mm256_storeu_ps(d + j, _mm256_add_ps(_mm256_loadu_ps(d + j), _mm256_loadu_ps(s + j)));
    } else if (kind == PE_ROW_SAME && dtype == PE_BF16) {
        uint16_t *d = (uint16_t *)o;
        const uint16_t *s = (const uint16_t *)x;
        for (; j + 16 <= n; j += 16) {
            __m256 ae, ao, be, bo;
            pe_ps_from_bf16x16(_mm256_loadu_si256((const __m256i *)(d + j)), &ae, &ao);
            pe_ps_from_bf16x16(_mm256_loadu_si256((const __m256i *)(s + j)), &be, &bo);
            _mm256_storeu_si256((__m256i *)(d + j),
                                pe_bf16x16_from_ps(_mm256_add_ps(ae, be), _mm256_add_ps(ao, bo)));
        }
    } else if (kind == PE_ROW_SAME) {
        uint16_t *d = (uint16_t *)o;
        const uint16_t *s = (const uint16_t *)x;
        for (; j + 8 <= n; j += 8) {
            __m256 a = pe_ps_from_half8(_mm_loadu_si128((const __m128i *)(d + j)), dtype);
            __m256 b = pe_ps_from_half8(_mm_loadu_si128((const __m128i *)(s + j)), dtype);
            _mm_storeu_si128((__m128i *)(d + j), pe_half8_from_ps(_mm256_add_ps(a, b), dtype));
        }
    } else {
        const float *s = (const float *)x;
        for (; dtype == PE_BF16 && j + 16 <= n; j += 16) {
            __m256 x0 = _mm256_loadu_ps(s + j), x1 = _mm256_loadu_ps(s + j + 8);
            if (kind == PE_ROW_PRODUCT) {
                const __m256i top = _mm256_set1_epi32((int)0xffff0000u);
                __m256i r0, r1;
                pe_bf16_rounded2(x0, x1, &r0, &r1);
                x0 = _mm256_castsi256_ps(_mm256_and_si256(r0, top));
                x1 = _mm256_castsi256_ps(_mm256_and_si256(r1, top));
            }
            pe_bf16_sum16(o + j * isz, x0, x1, 0);
        }
        for (; j + 8 <= n; j += 8) {
            __m256 v = _mm256_loadu_ps(s + j);
            pe_sum8(o + j * isz, kind == PE_ROW_PRODUCT ? pe_round8(v, dtype) : v, dtype);
        }
    }
    pe_row_add(o + j * isz, x + j * xsz, n - j, kind, dtype);
}

#endif /* PE_X86 */

#endif
