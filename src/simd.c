/*
 * simd.c -- the tables of kernels (simd.h) and the choice between them:
 * what the CPU running us can do.
 */
#include "simd.h"

#if PE_X86 && defined(_MSC_VER)
#include <immintrin.h>
#include <intrin.h>
#elif PE_X86
#include <cpuid.h>
#endif

/* The instance of a path, from the pieces its files define. */
#define PE_KERNELS_OF(path)                                                                        \
    {                                                                                              \
        .name = #path,                                                                             \
        .sincos_row = pe_sincos_row_##path,                                                        \
        .rotate_row = pe_rotate_row_##path,                                                        \
        .sinusoid_cell = pe_sinusoid_cell_##path,                                                  \
        .rope_run = pe_rope_run_##path,                                                            \
        .bias_rows = pe_bias_rows_##path,                                                          \
        .alibi_block = pe_alibi_block_##path,                                                      \
        .diagonals = pe_diagonals_##path,                                                          \
        .rel_task = pe_rel_task_##path,                                                            \
        .row_add = pe_row_add_##path,                                                              \
        .fire_block = pe_fire_block_##path,                                                        \
        .cope_rows = pe_cope_rows_##path,                                                          \
        .store_fence = pe_store_fence_##path,                                                      \
    }

const struct pe_kernels pe_kernels_scalar = PE_KERNELS_OF(scalar);

#if PE_ARM
/* The NEON path: its own kernels where it has them (the *_neon.c files),
 * the portable ones for the rest, so the table is always complete. */
const struct pe_kernels pe_kernels_neon = {
    .name = "neon",
    .sincos_row = pe_sincos_row_neon,
    .rotate_row = pe_rotate_row_neon,
    .sinusoid_cell = pe_sinusoid_cell_neon,
    .rope_run = pe_rope_run_neon,
    .bias_rows = pe_bias_rows_neon,
    .alibi_block = pe_alibi_block_scalar,
    .diagonals = pe_diagonals_scalar,
    .rel_task = pe_rel_task_scalar,
    .row_add = pe_row_add_neon,
    .fire_block = pe_fire_block_scalar,
    .cope_rows = pe_cope_rows_scalar,
    .store_fence = pe_store_fence_scalar,
};
#endif

#if PE_X86
const struct pe_kernels pe_kernels_avx2 = PE_KERNELS_OF(avx2);

/* AVX2, FMA and F16C, and an operating system that saves the YMM registers
 * (cpuid and xgetbv, as GCC's and clang's cpu_supports builtins do; clang's
 * builtin does not know "f16c"): cpuid.h and xgetbv in assembly with GCC
 * and clang, intrin.h's __cpuid, __cpuidex and _xgetbv with MSVC and
 * clang-cl; the same bits read. */
#if defined(_MSC_VER)
static int cpuid_leaf1_ecx(unsigned *c)
{
    int r[4];
    __cpuid(r, 0);
    if (r[0] < 1)
        return 0;
    __cpuid(r, 1);
    *c = (unsigned)r[2];
    return 1;
}
static unsigned xcr0_low(void)
{
    return (unsigned)_xgetbv(0);
}
static unsigned cpuid_leaf7_ebx(void)
{
    int r[4];
    __cpuid(r, 0);
    if (r[0] < 7)
        return 0;
    __cpuidex(r, 7, 0);
    return (unsigned)r[1];
}
#else
static int cpuid_leaf1_ecx(unsigned *c)
{
    unsigned a, b, d;
    return __get_cpuid(1, &a, &b, c, &d);
}
static unsigned xcr0_low(void)
{
    unsigned xcr0_lo, xcr0_hi;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    (void)xcr0_hi;
    return xcr0_lo;
}
static unsigned cpuid_leaf7_ebx(void)
{
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, NULL) < 7)
        return 0;
    __cpuid_count(7, 0, a, b, c, d);
    return b;
}
#endif

static int cpu_has_avx2(void)
{
    unsigned c;
    if (!cpuid_leaf1_ecx(&c))
        return 0;
    /* leaf 1, ecx: FMA (bit 12), OSXSAVE (27), AVX (28), F16C (29) */
    const unsigned want = 1u << 12 | 1u << 27 | 1u << 28 | 1u << 29;
    if ((c & want) != want)
        return 0;
    if ((xcr0_low() & 6u) != 6u) /* XMM and YMM state */
        return 0;
    return (cpuid_leaf7_ebx() >> 5) & 1u; /* leaf 7, ebx: AVX2 (bit 5) */
}
#endif

/* On AArch64 Advanced SIMD and the float16 conversions are architectural:
 * every CPU has the NEON path. */
int pe_simd_cpu_best(void)
{
#if PE_ARM
    return PE_SIMD_NEON;
#endif
#if PE_X86
    if (cpu_has_avx2())
        return PE_SIMD_AVX2;
#endif
    return PE_SIMD_SCALAR;
}

const struct pe_kernels *pe_kernels_for(int level)
{
#if PE_X86
    if (level == PE_SIMD_AVX2)
        return &pe_kernels_avx2;
#endif
#if PE_ARM
    if (level == PE_SIMD_NEON)
        return &pe_kernels_neon;
#endif
    (void)level;
    return &pe_kernels_scalar;
}
