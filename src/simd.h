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

static inline int pe_use_avx2(void)
{
    return PE_X86 && pe_simd_level == PE_SIMD_AVX2;
}

#endif
