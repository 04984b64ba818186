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

/* The instance of a path, from the pieces its files define: each field of
 * struct pe_kernels is the path's pe_<field>_<path>. */
/* clang-format off */
#define PE_KERNEL_FIELDS(X, path)                                                    \
    X(sincos_row, path) X(rotate_row, path) X(sinusoid_cell, path) X(rope_run, path) \
    X(bias_rows, path) X(alibi_block, path) X(diagonals, path) X(rel_task, path)     \
    X(row_add, path) X(fire_block, path) X(cope_rows, path) X(cope_z, path)           \
    X(cope_grad_row, path) X(cope_grad_table, path) X(complex_order_rows, path) \
    X(store_fence, path)
/* clang-format on */
#define PE_KERNEL_FIELD(field, path) .field = pe_##field##_##path,
#define PE_KERNELS_OF(path) {.name = #path, PE_KERNEL_FIELDS(PE_KERNEL_FIELD, path)}

const struct pe_kernels pe_kernels_scalar = PE_KERNELS_OF(scalar);

#if PE_ARM
/* The NEON path: its own kernels where it has them (the *_neon.c files),
 * the portable ones for the rest, so the table is always complete. */
#define pe_alibi_block_neon pe_alibi_block_scalar
#define pe_diagonals_neon pe_diagonals_scalar
#define pe_rel_task_neon pe_rel_task_scalar
#define pe_fire_block_neon pe_fire_block_scalar
#define pe_cope_rows_neon pe_cope_rows_scalar
#define pe_cope_z_neon pe_cope_z_scalar
#define pe_cope_grad_row_neon pe_cope_grad_row_scalar
#define pe_cope_grad_table_neon pe_cope_grad_table_scalar
#define pe_complex_order_rows_neon pe_complex_order_rows_scalar
#define pe_store_fence_neon pe_store_fence_scalar
const struct pe_kernels pe_kernels_neon = PE_KERNELS_OF(neon);
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
