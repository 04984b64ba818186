/*
 * simd.h -- the one dispatch point between the portable kernels and the
 * AVX2+FMA ones.
 *
 * Every kernel family is compiled twice from the same C: once for the
 * baseline of the target (SSE2 on x86-64, anything elsewhere) and once with
 * a function target attribute for AVX2+FMA+F16C.  No global -mavx2 is used,
 * so a wheel built on one x86-64 machine imports on any.  Which version runs
 * is decided once, at import, from the CPU's features and the POSENC_SIMD
 * environment variable, and kept in pe_simd_level.
 */
#ifndef PE_SIMD_H
#define PE_SIMD_H

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && !defined(PE_FORCE_PORTABLE)
#define PE_X86 1
#include <immintrin.h>
#define PE_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#else
#define PE_X86 0
#endif

enum pe_simd { PE_SIMD_SCALAR = 0, PE_SIMD_AVX2 = 1 };

/* Set by the module at import (module.c); read by the kernels. */
extern int pe_simd_level;

/* What the CPU running us can do, independent of any request. */
static inline int pe_simd_cpu_best(void)
{
#if PE_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c"))
        return PE_SIMD_AVX2;
#endif
    return PE_SIMD_SCALAR;
}

#if PE_X86
/* Four doubles to four floats rounded to odd (see pe_f32_round_odd), the
 * first step of an exact float64 -> float16 conversion. */
PE_TARGET_AVX2 static inline __m128 pe_cvtpd_ps_odd(__m256d d)
{
    __m128 f = _mm256_cvtpd_ps(d);
    __m256d b = _mm256_cvtps_pd(f);
    __m256d sign = _mm256_set1_pd(-0.0);
    __m256d inexact = _mm256_cmp_pd(b, d, _CMP_NEQ_OQ);
    __m256d away = _mm256_cmp_pd(_mm256_andnot_pd(sign, b), _mm256_andnot_pd(sign, d), _CMP_GT_OQ);
    /* the low 32 bits of each 64-bit mask lane, packed into four lanes */
    const __m256i pack = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    __m128i in32 =
        _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_castpd_si256(inexact), pack));
    __m128i aw32 =
        _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_castpd_si256(away), pack));
    __m128i one = _mm_set1_epi32(1);
    __m128i u = _mm_sub_epi32(_mm_castps_si128(f), _mm_and_si128(aw32, one));
    return _mm_castsi128_ps(_mm_or_si128(u, _mm_and_si128(in32, one)));
}
#endif

static inline int pe_use_avx2(void)
{
    return PE_X86 && pe_simd_level == PE_SIMD_AVX2;
}

#endif
