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
    X(bf16_rows, path) X(store_fence, path)
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
#define pe_bf16_rows_neon pe_bf16_rows_scalar
#define pe_store_fence_neon pe_store_fence_scalar
const struct pe_kernels pe_kernels_neon = PE_KERNELS_OF(neon);
#endif

#if PE_X86
const struct pe_kernels pe_kernels_avx2 = PE_KERNELS_OF(avx2);

/* The AVX-512 path: its own kernels where it has them (the *_avx512.c
 * files), the AVX2 ones for the rest (its CPUs have AVX2). */
#define pe_rope_run_avx512 pe_rope_run_avx2
#define pe_bias_rows_avx512 pe_bias_rows_avx2
#define pe_row_add_avx512 pe_row_add_avx2
#define pe_alibi_block_avx512 pe_alibi_block_avx2
#define pe_diagonals_avx512 pe_diagonals_avx2
#define pe_rel_task_avx512 pe_rel_task_avx2
#define pe_fire_block_avx512 pe_fire_block_avx2
#define pe_cope_rows_avx512 pe_cope_rows_avx2
#define pe_cope_z_avx512 pe_cope_z_avx2
#define pe_cope_grad_row_avx512 pe_cope_grad_row_avx2
#define pe_cope_grad_table_avx512 pe_cope_grad_table_avx2
#define pe_complex_order_rows_avx512 pe_complex_order_rows_avx2
#define pe_bf16_rows_avx512 pe_bf16_rows_avx2
#define pe_store_fence_avx512 pe_store_fence_avx2
const struct pe_kernels pe_kernels_avx512 = PE_KERNELS_OF(avx512);

/* The AVX-512 path on a CPU with AVX-512 BF16: the kernels whose bodies
 * use its instructions (the *_avx512bf16.c files), pe_kernels_avx512's for
 * the rest; the same name, and the same bits. */
#define pe_sincos_row_avx512_bf16 pe_sincos_row_avx512
#define pe_rotate_row_avx512_bf16 pe_rotate_row_avx512
#define pe_sinusoid_cell_avx512_bf16 pe_sinusoid_cell_avx512
#define pe_bias_rows_avx512_bf16 pe_bias_rows_avx512
#define pe_alibi_block_avx512_bf16 pe_alibi_block_avx512
#define pe_diagonals_avx512_bf16 pe_diagonals_avx512
#define pe_fire_block_avx512_bf16 pe_fire_block_avx512
#define pe_cope_rows_avx512_bf16 pe_cope_rows_avx512
#define pe_cope_z_avx512_bf16 pe_cope_z_avx512
#define pe_cope_grad_row_avx512_bf16 pe_cope_grad_row_avx512
#define pe_cope_grad_table_avx512_bf16 pe_cope_grad_table_avx512
#define pe_complex_order_rows_avx512_bf16 pe_complex_order_rows_avx512
#define pe_store_fence_avx512_bf16 pe_store_fence_avx512
const struct pe_kernels pe_kernels_avx512_bf16 = {.name = "avx512",
                                                  PE_KERNEL_FIELDS(PE_KERNEL_FIELD, avx512_bf16)};

/* AVX2, FMA and F16C, and an operating system that saves the YMM registers
 * (cpuid and xgetbv, as GCC's and clang's cpu_supports builtins do; clang's
 * builtin does not know "f16c"): cpuid.h and xgetbv in assembly with GCC
 * and clang, intrin.h's __cpuid, __cpuidex and _xgetbv with MSVC and
 * clang-cl; the same bits read.  AVX-512 on top of that: F, DQ, BW and VL
 * (cpuid leaf 7), and an operating system that saves the opmask and ZMM
 * registers (XCR0's bits 5, 6 and 7 beside XMM and YMM: 0xE6); BF16 apart
 * (leaf 7, sub-leaf 1). */
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
static unsigned cpuid_leaf7_1_eax(void)
{
    int r[4];
    __cpuid(r, 0);
    if (r[0] < 7)
        return 0;
    __cpuidex(r, 7, 0);
    if (r[0] < 1) /* the largest sub-leaf of leaf 7 */
        return 0;
    __cpuidex(r, 7, 1);
    return (unsigned)r[0];
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
static unsigned cpuid_leaf7_1_eax(void)
{
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, NULL) < 7)
        return 0;
    __cpuid_count(7, 0, a, b, c, d);
    if (a < 1) /* the largest sub-leaf of leaf 7 */
        return 0;
    __cpuid_count(7, 1, a, b, c, d);
    return a;
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

static int cpu_has_avx512(void)
{
    if (!cpu_has_avx2())
        return 0;
    /* XMM, YMM, the opmask registers, the upper halves of ZMM0-15, ZMM16-31 */
    if ((xcr0_low() & 0xE6u) != 0xE6u)
        return 0;
    /* leaf 7, ebx: AVX512F (bit 16), AVX512DQ (17), AVX512BW (30), AVX512VL (31) */
    const unsigned want = 1u << 16 | 1u << 17 | 1u << 30 | 1u << 31;
    return (cpuid_leaf7_ebx() & want) == want;
}

static int cpu_has_avx512_bf16(void)
{
    /* leaf 7, sub-leaf 1, eax: AVX512_BF16 (bit 5) */
    return cpu_has_avx512() && ((cpuid_leaf7_1_eax() >> 5) & 1u);
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
    if (cpu_has_avx512())
        return PE_SIMD_AVX512;
    if (cpu_has_avx2())
        return PE_SIMD_AVX2;
#endif
    return PE_SIMD_SCALAR;
}

int pe_simd_cpu_has(int level)
{
    int best = pe_simd_cpu_best();
    return level == PE_SIMD_SCALAR || level == best ||
           (level == PE_SIMD_AVX2 && best == PE_SIMD_AVX512);
}

int pe_simd_cpu_bf16(void)
{
#if PE_X86
    return cpu_has_avx512_bf16();
#else
    return 0;
#endif
}

const struct pe_kernels *pe_kernels_for(int level)
{
#if PE_X86
    if (level == PE_SIMD_AVX2)
        return &pe_kernels_avx2;
    if (level == PE_SIMD_AVX512)
        return cpu_has_avx512_bf16() ? &pe_kernels_avx512_bf16 : &pe_kernels_avx512;
#endif
#if PE_ARM
    if (level == PE_SIMD_NEON)
        return &pe_kernels_neon;
#endif
    (void)level;
    return &pe_kernels_scalar;
}
