/*
 * simd.h -- how the kernels are compiled and chosen: the one dispatch point
 * between the portable kernels and the AVX2+FMA+F16C ones.
 *
 * Every path-specific piece of work is a function in struct pe_kernels, a
 * table with one instance per path: pe_kernels_scalar (the portable files)
 * and pe_kernels_avx2 (the *_avx2.c files, compiled with a target pragma,
 * avx2.h; no global -mavx2, so a wheel built on one x86-64 machine imports
 * on any).  The glue picks the instance at import and in set_simd, with the
 * GIL held, and hands it to every entry point, which takes it once at the
 * start of the call and passes it down: a call never mixes the paths, and
 * a concurrent set_simd cannot change the path under a running kernel.
 *
 * Kernels specialised by layout and element type are written once, as a
 * PE_INLINE body taking `const int layout, const int dtype` last, and made
 * into a table of functions indexed [layout][dtype] by PE_SPECIALISE.
 */
#ifndef PE_SIMD_H
#define PE_SIMD_H

#include <stddef.h>
#include <stdint.h>

#include "pe.h"

/* ---- the compiler ---- */

/* A function always inlined (the bodies of specialised kernels and their
 * helpers); static. */
#if defined(_MSC_VER) && !defined(__clang__)
#define PE_INLINE static __forceinline
#elif defined(__GNUC__)
#define PE_INLINE static inline __attribute__((always_inline))
#else
#define PE_INLINE static inline
#endif

/* The AVX2 kernels are built with GCC and clang on x86 (64 and 32 bit);
 * elsewhere (ARM, MSVC) and with -DPE_FORCE_PORTABLE only the portable
 * path exists. */
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__) && !defined(PE_FORCE_PORTABLE)
#define PE_X86 1
#else
#define PE_X86 0
#endif

/* ---- one way to specialise a kernel ----
 *
 * PE_SPECIALISE(type, table, body, (params), (args)) defines a function
 * `static void f(params) { body(args, layout, dtype); }` for each layout
 * 0, 1 and dtype PE_F16, PE_F32, PE_F64, PE_BF16 (body inlined with both
 * constant, so its branches on them fold away), and
 * `type table[2][PE_NDTYPES]` holding them, indexed [layout][dtype].  type
 * is the table's element type with its qualifiers (`const pe_rope_run_fn`,
 * or `static const ...` for a table of one file). */
#define PE_UNPAREN(...) __VA_ARGS__
#define PE_SPECIALISE_ONE(name, body, params, args, layout, dtype)                                 \
    static void name params                                                                        \
    {                                                                                              \
        body(PE_UNPAREN args, layout, dtype);                                                      \
    }
#define PE_SPECIALISE(type, table, body, params, args)                                             \
    PE_SPECIALISE_ONE(table##_0_f16, body, params, args, 0, PE_F16)                                \
    PE_SPECIALISE_ONE(table##_0_f32, body, params, args, 0, PE_F32)                                \
    PE_SPECIALISE_ONE(table##_0_f64, body, params, args, 0, PE_F64)                                \
    PE_SPECIALISE_ONE(table##_0_bf16, body, params, args, 0, PE_BF16)                              \
    PE_SPECIALISE_ONE(table##_1_f16, body, params, args, 1, PE_F16)                                \
    PE_SPECIALISE_ONE(table##_1_f32, body, params, args, 1, PE_F32)                                \
    PE_SPECIALISE_ONE(table##_1_f64, body, params, args, 1, PE_F64)                                \
    PE_SPECIALISE_ONE(table##_1_bf16, body, params, args, 1, PE_BF16)                              \
    type table[2][PE_NDTYPES] = {{table##_0_f16, table##_0_f32, table##_0_f64, table##_0_bf16},    \
                                 {table##_1_f16, table##_1_f32, table##_1_f64, table##_1_bf16}}

/* PE_SPECIALISE_ROPE: the same for the four layouts of enum
 * pe_rope_layout, a table `type table[PE_ROPE_NLAYOUTS][PE_NDTYPES]`. */
#define PE_SPECIALISE_LAYOUT(table, body, params, args, l)                                         \
    PE_SPECIALISE_ONE(table##_##l##_f16, body, params, args, l, PE_F16)                            \
    PE_SPECIALISE_ONE(table##_##l##_f32, body, params, args, l, PE_F32)                            \
    PE_SPECIALISE_ONE(table##_##l##_f64, body, params, args, l, PE_F64)                            \
    PE_SPECIALISE_ONE(table##_##l##_bf16, body, params, args, l, PE_BF16)
#define PE_SPECIALISE_ROW(table, l)                                                                \
    {                                                                                              \
        table##_##l##_f16, table##_##l##_f32, table##_##l##_f64, table##_##l##_bf16                \
    }
#define PE_SPECIALISE_ROPE(type, table, body, params, args)                                        \
    PE_SPECIALISE_LAYOUT(table, body, params, args, 0)                                             \
    PE_SPECIALISE_LAYOUT(table, body, params, args, 1)                                             \
    PE_SPECIALISE_LAYOUT(table, body, params, args, 2)                                             \
    PE_SPECIALISE_LAYOUT(table, body, params, args, 3)                                             \
    type table[PE_ROPE_NLAYOUTS][PE_NDTYPES] = {                                                   \
        PE_SPECIALISE_ROW(table, 0), PE_SPECIALISE_ROW(table, 1), PE_SPECIALISE_ROW(table, 2),     \
        PE_SPECIALISE_ROW(table, 3)}

/* PE_SPECIALISE_DTYPE: the same for a table `type table[PE_NDTYPES]`,
 * body taking a layout of 0. */
#define PE_SPECIALISE_DTYPE(type, table, body, params, args)                                       \
    PE_SPECIALISE_LAYOUT(table, body, params, args, 0)                                             \
    type table[PE_NDTYPES] = PE_SPECIALISE_ROW(table, 0)

/* ---- the table of kernels ---- */

struct pe_rotor;
struct pe_rope_run;
struct pe_toeplitz;
struct pe_diagonals;

/* sincos.c: s[i], c[i] = sin, cos of pos * freq[i], i < n. */
typedef void (*pe_sincos_row_fn)(double pos, const double *freq, ptrdiff_t n, double *s, double *c);
/* sincos.c: a row rotated by the step whose sin and cos are sd, cd. */
typedef void (*pe_rotate_row_fn)(double *s, double *c, const double *sd, const double *cd,
                                 const double *freq, double pos, double m, ptrdiff_t n);
/* sinusoid.c: rows [r0, r0 + n) of a table, one cell of the anchor grid
 * (row r at out + r * row_stride: sin and cos of pos[r] * freq[i], i < half;
 * wmax the largest |freq[i]|). */
typedef void (*pe_sinusoid_cell_fn)(struct pe_rotor *rt, const double *pos, ptrdiff_t r0,
                                    ptrdiff_t n, const double *freq, ptrdiff_t half, double wmax,
                                    char *out, ptrdiff_t row_stride);
/* rope_rows.c: one run of rows of apply_rope. */
typedef void (*pe_rope_run_fn)(const struct pe_rope_run *r);
/* bias.c: rows [r0, r1) of a bias, each a slice of its head's vector. */
typedef void (*pe_bias_rows_fn)(const struct pe_toeplitz *t, ptrdiff_t r0, ptrdiff_t r1);
/* bias.c: elements [t0, t1) of a head's ALiBi vector, d0 the distance at t0. */
typedef void (*pe_alibi_block_fn)(char *o, ptrdiff_t t0, ptrdiff_t t1, int64_t d0, double slope);
/* bias.c: every row of head h of a gradient added into that head's
 * diagonal sums (T5's backward pass). */
typedef void (*pe_diagonals_fn)(const struct pe_diagonals *s, ptrdiff_t h);
struct pe_rel_gather;
/* relative.c: one task of the gather into scores: row `task` of the
 * (batch * heads * q_len) rows by query, or the row of tiles `task` of the
 * (batch * heads * tiles_q) rows of tiles by key. */
typedef void (*pe_rel_task_fn)(const struct pe_rel_gather *g, ptrdiff_t task);
/* relative.c: o[j] += x[j], j < n, a row of scores and of a dense term
 * (float32, or float64 for float64 scores), each sum rounded once. */
typedef void (*pe_rel_sum_fn)(char *o, const char *x, ptrdiff_t n);

struct pe_kernels {
    const char *name; /* "scalar" or "avx2", as set_simd takes it */
    pe_sincos_row_fn sincos_row;
    pe_rotate_row_fn rotate_row;
    const pe_sinusoid_cell_fn (*sinusoid_cell)[PE_NDTYPES]; /* [enum pe_layout][enum pe_dtype] */
    const pe_rope_run_fn (*rope_run)[PE_NDTYPES];       /* [enum pe_rope_layout][enum pe_dtype] */
    const pe_bias_rows_fn (*bias_rows)[PE_NDTYPES];     /* [PE_BIAS_WRITE or _ADD][enum pe_dtype] */
    const pe_alibi_block_fn (*alibi_block)[PE_NDTYPES]; /* [causal][enum pe_dtype] */
    /* [sums in float64][enum pe_dtype of the gradient] */
    const pe_diagonals_fn (*diagonals)[PE_NDTYPES];
    const pe_rel_task_fn (*rel_task)[PE_NDTYPES]; /* [by key][enum pe_dtype of the scores] */
    const pe_rel_sum_fn (*rel_sum)[PE_NDTYPES];   /* [store][enum pe_dtype of the scores] */
    /* orders the calling thread's non-temporal stores (bias_rows') before
     * what it does next; nothing on the portable path */
    void (*store_fence)(void);
};

enum pe_simd { PE_SIMD_SCALAR = 0, PE_SIMD_AVX2 = 1 };

/* The best path the CPU running us has (simd.c). */
int pe_simd_cpu_best(void);

/* The table of a path; the portable one for a path this build lacks. */
const struct pe_kernels *pe_kernels_for(int level);

extern const struct pe_kernels pe_kernels_scalar;
#if PE_X86
extern const struct pe_kernels pe_kernels_avx2;
#endif

/* The pieces of the two instances, defined in the kernel files. */
void pe_sincos_row_scalar(double pos, const double *freq, ptrdiff_t n, double *s, double *c);
void pe_rotate_row_scalar(double *s, double *c, const double *sd, const double *cd,
                          const double *freq, double pos, double m, ptrdiff_t n);
extern const pe_sinusoid_cell_fn pe_sinusoid_cell_scalar[2][PE_NDTYPES];
extern const pe_rope_run_fn pe_rope_run_scalar[PE_ROPE_NLAYOUTS][PE_NDTYPES];
extern const pe_bias_rows_fn pe_bias_rows_scalar[2][PE_NDTYPES];
extern const pe_alibi_block_fn pe_alibi_block_scalar[2][PE_NDTYPES];
extern const pe_diagonals_fn pe_diagonals_scalar[2][PE_NDTYPES];
extern const pe_rel_task_fn pe_rel_task_scalar[2][PE_NDTYPES];
extern const pe_rel_sum_fn pe_rel_sum_scalar[2][PE_NDTYPES];
void pe_store_fence_scalar(void);

#if PE_X86
void pe_sincos_row_avx2(double pos, const double *freq, ptrdiff_t n, double *s, double *c);
void pe_rotate_row_avx2(double *s, double *c, const double *sd, const double *cd,
                        const double *freq, double pos, double m, ptrdiff_t n);
extern const pe_sinusoid_cell_fn pe_sinusoid_cell_avx2[2][PE_NDTYPES];
extern const pe_rope_run_fn pe_rope_run_avx2[PE_ROPE_NLAYOUTS][PE_NDTYPES];
extern const pe_bias_rows_fn pe_bias_rows_avx2[2][PE_NDTYPES];
extern const pe_alibi_block_fn pe_alibi_block_avx2[2][PE_NDTYPES];
extern const pe_diagonals_fn pe_diagonals_avx2[2][PE_NDTYPES];
extern const pe_rel_task_fn pe_rel_task_avx2[2][PE_NDTYPES];
extern const pe_rel_sum_fn pe_rel_sum_avx2[2][PE_NDTYPES];
void pe_store_fence_avx2(void);
#endif

#endif
