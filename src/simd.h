/*
 * simd.h -- how the kernels are compiled and chosen: the one dispatch point
 * between the portable kernels, the AVX2+FMA+F16C ones (x86) and the NEON
 * ones (AArch64).
 *
 * Every path-specific piece of work is a function in struct pe_kernels, a
 * table with one instance per path: pe_kernels_scalar (the portable files),
 * pe_kernels_avx2 (the *_avx2.c files, compiled with a target pragma,
 * avx2.h; no global -mavx2, so a wheel built on one x86-64 machine imports
 * on any), pe_kernels_avx512 and pe_kernels_avx512_bf16 (the *_avx512.c
 * files, avx512.h, and for the second the *_avx512bf16.c ones, whose
 * target adds AVX-512 BF16: one table for CPUs with it and one for those
 * without; the AVX2 functions where a kernel has no AVX-512 body) and
 * pe_kernels_neon (the *_neon.c files, neon.h; the portable functions
 * where a kernel has no NEON body).  The glue picks the instance at import and in
 * set_simd, with the GIL held, and hands it to every entry point, which takes it once at the start
 * of the call and passes it down: a call never mixes the paths, and a concurrent set_simd cannot
 * change the path under a running kernel.
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

/* ---- the compiler ----
 *
 * GCC's and clang's spellings, and MSVC's: a macro below is the one place
 * such a spelling is written.  MSVC's (_MSC_VER) come first, so that
 * clang-cl, which takes both and defines _MSC_VER, compiles the ones MSVC
 * sees (tests/c/run_msvc.sh); GCC and clang never define _MSC_VER. */

/* A function always inlined (the bodies of specialised kernels and their
 * helpers); static. */
#if defined(_MSC_VER)
#define PE_INLINE static __forceinline
#elif defined(__GNUC__) || defined(__clang__)
#define PE_INLINE static inline __attribute__((always_inline))
#else
#define PE_INLINE static inline
#endif

/* A helper kept out of line (a rare case, out of the hot loop's registers);
 * static, and no warning if a file including it does not call it. */
#if defined(_MSC_VER)
#define PE_NOINLINE static __declspec(noinline)
#elif defined(__GNUC__) || defined(__clang__)
#define PE_NOINLINE static __attribute__((noinline, unused))
#else
#define PE_NOINLINE static
#endif

/* The AVX2 kernels are built on x86 with GCC and clang (64 and 32 bit) and
 * with MSVC or clang-cl on x86-64 (_M_X64); elsewhere (ARM, 32-bit MSVC)
 * and with -DPE_FORCE_PORTABLE only the portable path exists. */
#if (((defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)) || defined(_M_X64)) &&      \
    !defined(PE_FORCE_PORTABLE)
#define PE_X86 1
#else
#define PE_X86 0
#endif

/* A hint that the cache line holding p is about to be read, or written
 * (PE_PREFETCH_W); no fault (p need not be valid), no effect on any result.
 * MSVC has no __builtin_prefetch: there it is SSE's prefetch on x86-64;
 * PE_HAS_PREFETCH is 0 where there is none. */
#if defined(_MSC_VER) && defined(_M_X64)
#include <xmmintrin.h>
#define PE_HAS_PREFETCH 1
#define PE_PREFETCH(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)
#define PE_PREFETCH_W(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)
#elif defined(__GNUC__) || defined(__clang__)
#define PE_HAS_PREFETCH 1
#define PE_PREFETCH(p) __builtin_prefetch(p)
#define PE_PREFETCH_W(p) __builtin_prefetch(p, 1)
#else
#define PE_HAS_PREFETCH 0
#define PE_PREFETCH(p) ((void)(p))
#define PE_PREFETCH_W(p) ((void)(p))
#endif

/* The NEON kernels are built with GCC and clang on AArch64 (Linux, Apple
 * silicon), where Advanced SIMD and the float16 conversions are part of
 * the architecture; not with -DPE_FORCE_PORTABLE. */
#if defined(__aarch64__) && defined(__GNUC__) && !defined(PE_FORCE_PORTABLE)
#define PE_ARM 1
#else
#define PE_ARM 0
#endif

/* -x (a float or double), kept apart from the product it is a factor of:
 * b * PE_NEG_APART(s) is b (-s), a NaN b passing through with its own sign.
 * On AArch64 GCC folds b * -s into FNMUL, -(b s), which flips it (in scalar
 * code only: its vector loops negate s), so there the negation is made
 * opaque; elsewhere this is -x. */
#if PE_ARM
#define PE_NEG_APART(x)                                                                            \
    __extension__({                                                                                \
        __typeof__(-(x)) pe_neg_ = -(x);                                                           \
        __asm__("" : "+w"(pe_neg_));                                                               \
        pe_neg_;                                                                                   \
    })
#else
#define PE_NEG_APART(x) (-(x))
#endif

/* ---- one way to specialise a kernel ----
 *
 * PE_SPECIALISE(type, table, body, (params), (args)) defines a function
 * `static void f(params) { body(args, layout, dtype); }` for each layout
 * 0, 1 and each dtype of PE_DTYPES (body inlined with both constant, so
 * its branches on them fold away), and `type table[2][PE_NDTYPES]` holding
 * them, indexed [layout][dtype].  type is the table's element type with
 * its qualifiers (`const pe_rope_run_fn`, or `static const ...` for a
 * table of one file). */
#define PE_UNPAREN(...) __VA_ARGS__
#define PE_SPECIALISE_ONE(name, body, params, args, layout, dtype)                                 \
    static void name params                                                                        \
    {                                                                                              \
        body(PE_UNPAREN args, layout, dtype);                                                      \
    }
/* The functions of layout l, one per dtype, and the row of the table
 * holding them. */
#define PE_SPECIALISE_DT(s, E, ctype, npy, table, body, params, args, l)                           \
    PE_SPECIALISE_ONE(table##_##l##_##s, body, params, args, l, E)
#define PE_SPECIALISE_LAYOUT(table, body, params, args, l)                                         \
    PE_DTYPES(PE_SPECIALISE_DT, table, body, params, args, l)
#define PE_SPECIALISE_ENTRY(s, E, ctype, npy, table, l) table##_##l##_##s,
#define PE_SPECIALISE_ROW(table, l) {PE_DTYPES(PE_SPECIALISE_ENTRY, table, l)}
#define PE_SPECIALISE(type, table, body, params, args)                                             \
    PE_SPECIALISE_LAYOUT(table, body, params, args, 0)                                             \
    PE_SPECIALISE_LAYOUT(table, body, params, args, 1)                                             \
    type table[2][PE_NDTYPES] = {PE_SPECIALISE_ROW(table, 0), PE_SPECIALISE_ROW(table, 1)}

/* PE_SPECIALISE_4: the same for four layouts, a table `type
 * table[4][PE_NDTYPES]`; PE_SPECIALISE_ROPE, for the four layouts of enum
 * pe_rope_layout (PE_ROPE_NLAYOUTS). */
#define PE_SPECIALISE_4(type, table, body, params, args)                                           \
    PE_SPECIALISE_LAYOUT(table, body, params, args, 0)                                             \
    PE_SPECIALISE_LAYOUT(table, body, params, args, 1)                                             \
    PE_SPECIALISE_LAYOUT(table, body, params, args, 2)                                             \
    PE_SPECIALISE_LAYOUT(table, body, params, args, 3)                                             \
    type table[4][PE_NDTYPES] = {PE_SPECIALISE_ROW(table, 0), PE_SPECIALISE_ROW(table, 1),         \
                                 PE_SPECIALISE_ROW(table, 2), PE_SPECIALISE_ROW(table, 3)}
#define PE_SPECIALISE_ROPE PE_SPECIALISE_4

/* PE_SPECIALISE_DTYPE: the same for a table `type table[PE_NDTYPES]`,
 * body taking a layout of 0. */
#define PE_SPECIALISE_DTYPE(type, table, body, params, args)                                       \
    PE_SPECIALISE_LAYOUT(table, body, params, args, 0)                                             \
    type table[PE_NDTYPES] = PE_SPECIALISE_ROW(table, 0)

/* ---- a row of values added into a row of scores ----
 *
 * The one way every bias and relative kernel adds a row: o[j] += x[j],
 * j < n, o of dtype, each sum rounded once (float16 and bfloat16 widened
 * to float32, added and rounded once: the correctly rounded sum, as NumPy
 * adds float16 arrays and ml_dtypes bfloat16 ones, float32 having more
 * than twice their bits plus two).  What x holds is the kind, the first
 * index of the kernels' row_add table:
 *   PE_ROW_SAME     elements of o's own type (a bias's vector)
 *   PE_ROW_SUM      float32 (float64 into float64 scores), added as they
 *                   are (a dense term)
 *   PE_ROW_PRODUCT  float32 (float64 into float64 scores), each rounded to
 *                   o's type first (a gathered product: the term made in
 *                   the scores' type)
 *   PE_ROW_CAST     as PE_ROW_SUM, but o[j] = x[j] instead: each value
 *                   rounded once to o's type (pe_cast_row, the cast)
 * pe_row_add is the portable body; avx2.h's pe_row_add_simd the vector
 * one, which ends with this one: the same bits. */
enum { PE_ROW_SAME = 0, PE_ROW_SUM = 1, PE_ROW_PRODUCT = 2, PE_ROW_CAST = 3, PE_ROW_NKINDS = 4 };

/* o[j] = x[j], j < n: float32 values (float64 for float64) each rounded
 * once to dtype, as NumPy's astype rounds them (bfloat16 as ml_dtypes: to
 * nearest even, a NaN made quiet with its sign and top payload bits); the
 * body of PE_ROW_CAST (pe_cast). */
PE_INLINE void pe_cast_row(char *o, const char *x, ptrdiff_t n, const int dtype)
{
    if (dtype == PE_F64) {
        for (ptrdiff_t j = 0; j < n; ++j)
            ((double *)o)[j] = ((const double *)x)[j];
    } else if (dtype == PE_F32) {
        for (ptrdiff_t j = 0; j < n; ++j)
            ((float *)o)[j] = ((const float *)x)[j];
    } else {
        for (ptrdiff_t j = 0; j < n; ++j)
            ((uint16_t *)o)[j] = pe_store16(((const float *)x)[j], dtype);
    }
}

PE_INLINE void pe_row_add(char *o, const char *x, ptrdiff_t n, const int kind, const int dtype)
{
    if (kind == PE_ROW_CAST) {
        pe_cast_row(o, x, n, dtype);
    } else if (dtype == PE_F32) {
        float *d = (float *)o;
        const float *s = (const float *)x;
        for (ptrdiff_t j = 0; j < n; ++j)
            d[j] = d[j] + s[j];
    } else if (dtype == PE_F64) {
        double *d = (double *)o;
        const double *s = (const double *)x;
        for (ptrdiff_t j = 0; j < n; ++j)
            d[j] = d[j] + s[j];
    } else {
        uint16_t *d = (uint16_t *)o;
        for (ptrdiff_t j = 0; j < n; ++j) {
            float v = kind == PE_ROW_SAME ? pe_load16(((const uint16_t *)x)[j], dtype)
                                          : ((const float *)x)[j];
            if (kind == PE_ROW_PRODUCT)
                v = pe_load16(pe_store16(v, dtype), dtype);
            d[j] = pe_store16(pe_load16(d[j], dtype) + v, dtype);
        }
    }
}

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
/* rope_run.c: one run of rows of apply_rope. */
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
/* row.c: a row of values added into a row of scores, or cast into a row
 * (pe_row_add). */
typedef void (*pe_row_add_fn)(char *o, const char *x, ptrdiff_t n);
struct pe_fire;
/* fire.c: FIRE's MLP at the n (a multiple of 8) normalised distances x:
 * out[h * stride + j] for each of f's heads, with PE_FIRE_SCRATCH(width,
 * n) doubles of scratch (the hidden layer, and which of its units each
 * block of eight keys uses). */
typedef void (*pe_fire_block_fn)(const struct pe_fire *f, const double *x, ptrdiff_t n,
                                 double *scratch, double *out, ptrdiff_t stride);
#define PE_FIRE_SCRATCH(width, n) ((width) * (n) + ((n) / 8 * ((width) + 1) + 1) / 2)
struct pe_cope;
/* cope.c: rows [r0, r1) of CoPE's position logits (of the batch * heads *
 * q_len rows) added into the scores or written, z their logits of the
 * integer positions (r1 - r0 rows of npos). */
typedef void (*pe_cope_rows_fn)(const struct pe_cope *c, ptrdiff_t r0, ptrdiff_t r1,
                                const double *z);
/* cope.c: rows [r0, r1) of CoPE's position logits of the integer positions,
 * z[r, p] = sum_k q[r, k] et[k, p] for p < count (pe_cope_products). */
typedef void (*pe_cope_z_fn)(const double *q, const double *et, ptrdiff_t d, ptrdiff_t npos,
                             ptrdiff_t count, double *z, ptrdiff_t r0, ptrdiff_t r1);
/* cope.h: the gates of n logits of a row (of dtype) and their mirrors,
 * sig[j] = pe_cope_gate(a[j]) and sneg[j] = pe_cope_gate(-a[j]), from one
 * exponential each (the backward's sigmoid(a) and sigmoid(-a)). */
typedef void (*pe_cope_sig_fn)(const char *l, int dtype, ptrdiff_t n, double *sig, double *sneg);
struct pe_cope_grad;
/* cope.c: row r of CoPE's backward (pe_cope_grad_row), with
 * PE_COPE_GRAD_SCRATCH(k_len, npos, d) doubles of scratch. */
typedef void (*pe_cope_grad_row_fn)(const struct pe_cope_grad *c, ptrdiff_t r, double *scratch);
/* cope.c: positions [p0, p1) of the gradient of CoPE's table
 * (pe_cope_grad_table). */
typedef void (*pe_cope_grad_table_fn)(const struct pe_cope_grad *c, ptrdiff_t p0, ptrdiff_t p1);
struct pe_complex_order;
/* complex_order.c: tokens [t0, t1) of complex-order embeddings, the flags
 * of the tables holding a value that is not finite or-ed into *bad. */
typedef void (*pe_complex_order_rows_fn)(const struct pe_complex_order *c, ptrdiff_t t0,
                                         ptrdiff_t t1, unsigned *bad);

struct pe_bf16_gemm;
/* dot.c: rows [m0, m1) of head h of the products of bfloat16 vectors
 * (dot.h), b of head h first laid out in `pack` (pe_bf16_pack_bytes) when
 * pack_now is set, else taken from it as an earlier call left it. */
typedef void (*pe_bf16_rows_fn)(const struct pe_bf16_gemm *g, ptrdiff_t h, ptrdiff_t m0,
                                ptrdiff_t m1, void *pack, int pack_now);

struct pe_kernels {
    const char *name; /* "scalar", "avx2", "avx512" or "neon", as set_simd takes it */
    pe_sincos_row_fn sincos_row;
    pe_rotate_row_fn rotate_row;
    const pe_sinusoid_cell_fn (*sinusoid_cell)[PE_NDTYPES]; /* [enum pe_layout][enum pe_dtype] */
    const pe_rope_run_fn (*rope_run)[PE_NDTYPES];       /* [enum pe_rope_layout][enum pe_dtype] */
    const pe_bias_rows_fn (*bias_rows)[PE_NDTYPES];     /* [PE_BIAS_WRITE or _ADD][enum pe_dtype] */
    const pe_alibi_block_fn (*alibi_block)[PE_NDTYPES]; /* [causal][enum pe_dtype] */
    /* [sums in float64][enum pe_dtype of the gradient] */
    const pe_diagonals_fn (*diagonals)[PE_NDTYPES];
    const pe_rel_task_fn (*rel_task)[PE_NDTYPES]; /* [by key][enum pe_dtype of the scores] */
    const pe_row_add_fn (*row_add)[PE_NDTYPES]; /* [PE_ROW_SAME, ..., PE_ROW_CAST][enum pe_dtype] */
    pe_fire_block_fn fire_block;
    const pe_cope_rows_fn (*cope_rows)[PE_NDTYPES]; /* [add][enum pe_dtype of the scores] */
    pe_cope_z_fn cope_z;
    pe_cope_grad_row_fn cope_grad_row;
    pe_cope_grad_table_fn cope_grad_table;
    /* [interleaved][enum pe_dtype of the tables and parts] */
    const pe_complex_order_rows_fn (*complex_order_rows)[PE_NDTYPES];
    pe_bf16_rows_fn bf16_rows;
    /* orders the calling thread's non-temporal stores (bias_rows') before
     * what it does next; nothing on the portable path */
    void (*store_fence)(void);
};

/* The paths, in the order of simd_names (module_run.c); AVX-512 after
 * AVX2, which every CPU with it also has. */
enum pe_simd { PE_SIMD_SCALAR = 0, PE_SIMD_AVX2 = 1, PE_SIMD_NEON = 2, PE_SIMD_AVX512 = 3 };
#define PE_SIMD_NPATHS 4

/* The best path the CPU running us has (simd.c). */
int pe_simd_cpu_best(void);

/* Whether the CPU running us has the path (the portable one always; AVX2
 * where it has AVX-512). */
int pe_simd_cpu_has(int level);

/* Whether the CPU has AVX-512 BF16 (and the AVX-512 path): its table is
 * then pe_kernels_avx512_bf16. */
int pe_simd_cpu_bf16(void);

/* The table of a path; the portable one for a path this build lacks. */
const struct pe_kernels *pe_kernels_for(int level);

extern const struct pe_kernels pe_kernels_scalar;
#if PE_X86
extern const struct pe_kernels pe_kernels_avx2;
extern const struct pe_kernels pe_kernels_avx512;
extern const struct pe_kernels pe_kernels_avx512_bf16;
#endif
#if PE_ARM
extern const struct pe_kernels pe_kernels_neon;
#endif

/* The pieces of the instance of a path (scalar, avx2), defined in the
 * kernel files; the NEON path's are declared below. */
#define PE_KERNELS_DECLARE(path)                                                                   \
    void pe_sincos_row_##path(double pos, const double *freq, ptrdiff_t n, double *s, double *c);  \
    void pe_rotate_row_##path(double *s, double *c, const double *sd, const double *cd,            \
                              const double *freq, double pos, double m, ptrdiff_t n);              \
    extern const pe_sinusoid_cell_fn pe_sinusoid_cell_##path[2][PE_NDTYPES];                       \
    extern const pe_rope_run_fn pe_rope_run_##path[PE_ROPE_NLAYOUTS][PE_NDTYPES];                  \
    extern const pe_bias_rows_fn pe_bias_rows_##path[2][PE_NDTYPES];                               \
    extern const pe_alibi_block_fn pe_alibi_block_##path[2][PE_NDTYPES];                           \
    extern const pe_diagonals_fn pe_diagonals_##path[2][PE_NDTYPES];                               \
    extern const pe_rel_task_fn pe_rel_task_##path[2][PE_NDTYPES];                                 \
    extern const pe_row_add_fn pe_row_add_##path[PE_ROW_NKINDS][PE_NDTYPES];                       \
    void pe_fire_block_##path(const struct pe_fire *f, const double *x, ptrdiff_t n,               \
                              double *scratch, double *out, ptrdiff_t stride);                     \
    extern const pe_cope_rows_fn pe_cope_rows_##path[2][PE_NDTYPES];                               \
    void pe_cope_z_##path(const double *q, const double *et, ptrdiff_t d, ptrdiff_t npos,          \
                          ptrdiff_t count, double *z, ptrdiff_t r0, ptrdiff_t r1);                 \
    void pe_cope_grad_row_##path(const struct pe_cope_grad *c, ptrdiff_t r, double *scratch);      \
    void pe_cope_grad_table_##path(const struct pe_cope_grad *c, ptrdiff_t p0, ptrdiff_t p1);      \
    extern const pe_complex_order_rows_fn pe_complex_order_rows_##path[2][PE_NDTYPES];             \
    void pe_bf16_rows_##path(const struct pe_bf16_gemm *g, ptrdiff_t h, ptrdiff_t m0,              \
                             ptrdiff_t m1, void *pack, int pack_now);                              \
    void pe_store_fence_##path(void);

PE_KERNELS_DECLARE(scalar)
#if PE_X86
PE_KERNELS_DECLARE(avx2)
/* The kernels the AVX-512 path has bodies of (the rest of its tables are
 * the AVX2 functions, simd.c); _bf16, those whose bodies use AVX-512 BF16
 * (the other fields of pe_kernels_avx512_bf16 are pe_kernels_avx512's). */
void pe_sincos_row_avx512(double pos, const double *freq, ptrdiff_t n, double *s, double *c);
void pe_rotate_row_avx512(double *s, double *c, const double *sd, const double *cd,
                          const double *freq, double pos, double m, ptrdiff_t n);
extern const pe_sinusoid_cell_fn pe_sinusoid_cell_avx512[2][PE_NDTYPES];
extern const pe_row_add_fn pe_row_add_avx512_bf16[PE_ROW_NKINDS][PE_NDTYPES];
extern const pe_rope_run_fn pe_rope_run_avx512_bf16[PE_ROPE_NLAYOUTS][PE_NDTYPES];
extern const pe_rel_task_fn pe_rel_task_avx512_bf16[2][PE_NDTYPES];
void pe_bf16_rows_avx512_bf16(const struct pe_bf16_gemm *g, ptrdiff_t h, ptrdiff_t m0, ptrdiff_t m1,
                              void *pack, int pack_now);
#endif
#if PE_ARM
/* The kernels the NEON path has bodies of (the rest of its table is the
 * portable functions, simd.c). */
void pe_sincos_row_neon(double pos, const double *freq, ptrdiff_t n, double *s, double *c);
void pe_rotate_row_neon(double *s, double *c, const double *sd, const double *cd,
                        const double *freq, double pos, double m, ptrdiff_t n);
extern const pe_sinusoid_cell_fn pe_sinusoid_cell_neon[2][PE_NDTYPES];
extern const pe_rope_run_fn pe_rope_run_neon[PE_ROPE_NLAYOUTS][PE_NDTYPES];
extern const pe_bias_rows_fn pe_bias_rows_neon[2][PE_NDTYPES];
extern const pe_row_add_fn pe_row_add_neon[PE_ROW_NKINDS][PE_NDTYPES];
#endif

#endif
