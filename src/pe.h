/*
 * pe.h -- what the kernel files share with each other and with the glue:
 * element types and layouts, the limits both sides check, and the entry
 * points module.c calls.
 *
 * Kernels take plain pointers, lengths and strides.  They never see a
 * Python object, so they can run with the GIL released and be called from
 * C tests as they are.  Each entry point that has a SIMD path takes the
 * table of kernels of the path to run (simd.h) as its first argument.
 */
#ifndef PE_H
#define PE_H

/* No floating-point contraction (a * b + c made one FMA, rounded once) in
 * any file, as -ffp-contract=off does for GCC and clang (setup.py): every
 * rounding is the one written, FMA only where a kernel writes it, the same
 * bits on every path.  MSVC has it off at /fp:precise since Visual Studio
 * 2022 (on before, taking effect with /arch:AVX2); clang-cl's C default is
 * on.  pe.h comes before any code in every file. */
#if defined(_MSC_VER) && !defined(__clang__)
#pragma fp_contract(off)
#elif defined(_MSC_VER)
#pragma STDC FP_CONTRACT OFF
#endif

#ifdef _OPENMP
#include <omp.h>
#endif
#include <stddef.h>
#include <stdint.h>

#include "half.h"

/* The element types of the kernels, in the order of enum pe_dtype:
 * X(suffix, enum value, C type of an element, NumPy type of an element,
 * ...) with the caller's further arguments.  bfloat16 arrays reach the
 * kernels as their bits (uint16).  The specialisation tables (simd.h),
 * the element helpers below and module_args.c's type mapping are made
 * from this one list. */
#define PE_DTYPES(X, ...)                                                                          \
    X(f16, PE_F16, uint16_t, NPY_HALF, __VA_ARGS__)                                                \
    X(f32, PE_F32, float, NPY_FLOAT, __VA_ARGS__)                                                  \
    X(f64, PE_F64, double, NPY_DOUBLE, __VA_ARGS__)                                                \
    X(bf16, PE_BF16, uint16_t, NPY_UINT16, __VA_ARGS__)

/* Element type of a table written or an array transformed. */
#define PE_DTYPE_ENUM(s, E, ctype, npy, ...) E,
enum pe_dtype { PE_DTYPES(PE_DTYPE_ENUM, ~) PE_NDTYPES };
/* PE_NDTYPES: the number of element types, the extent of the kernels'
 * tables. */

/* Layout of a sinusoid row: sin/cos pairs, or all sines then all cosines. */
enum pe_layout { PE_INTERLEAVED = 0, PE_CONCAT = 1 };

/* Below this many output elements a kernel runs on one thread: waking the
 * OpenMP team costs more than the work. */
#define PE_PARALLEL_MIN 32768

/* The threads of a parallel region doing `work` elements: nthreads, or 1
 * below PE_PARALLEL_MIN. */
static inline int pe_team(int nthreads, ptrdiff_t work)
{
    return work >= PE_PARALLEL_MIN ? nthreads : 1;
}

/* The calling thread's number in its team (0 without OpenMP): the place
 * of its scratch in a kernel's allocation for the team. */
static inline int pe_thread_num(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* ---- elements of any type ---- */

/* Element i of p as a double (exact), and v rounded once stored there, one
 * pair per element type. */
static inline double pe_load_f16(const char *p, ptrdiff_t i)
{
    return (double)pe_f32_from_f16(((const uint16_t *)p)[i]);
}
static inline void pe_store_f16(char *p, ptrdiff_t i, double v)
{
    ((uint16_t *)p)[i] = pe_f16_from_f64(v);
}
static inline double pe_load_f32(const char *p, ptrdiff_t i)
{
    return (double)((const float *)p)[i];
}
static inline void pe_store_f32(char *p, ptrdiff_t i, double v)
{
    ((float *)p)[i] = (float)v;
}
static inline double pe_load_f64(const char *p, ptrdiff_t i)
{
    return ((const double *)p)[i];
}
static inline void pe_store_f64(char *p, ptrdiff_t i, double v)
{
    ((double *)p)[i] = v;
}
static inline double pe_load_bf16(const char *p, ptrdiff_t i)
{
    return (double)pe_f32_from_bf16(((const uint16_t *)p)[i]);
}
static inline void pe_store_bf16(char *p, ptrdiff_t i, double v)
{
    ((uint16_t *)p)[i] = pe_bf16_from_f64(v);
}

/* Bytes of an element of type dtype (an enum pe_dtype; 8 for any other
 * 8-byte type). */
#define PE_ITEMSIZE_CASE(s, E, ctype, ...)                                                         \
    case E:                                                                                        \
        return sizeof(ctype);
static inline size_t pe_itemsize(int dtype)
{
    switch (dtype) {
        PE_DTYPES(PE_ITEMSIZE_CASE, ~)
    default:
        return 8;
    }
}

/* v rounded once to dtype, stored as element i of p. */
#define PE_STORE_CASE(s, E, ctype, npy, p, i, v)                                                   \
    case E:                                                                                        \
        pe_store_##s(p, i, v);                                                                     \
        break;
static inline void pe_store(char *p, ptrdiff_t i, int dtype, double v)
{
    switch (dtype) {
        PE_DTYPES(PE_STORE_CASE, p, i, v)
    default:
        break;
    }
}

/* Element i of p, of type dtype, as a double (exact). */
#define PE_LOAD_CASE(s, E, ctype, npy, p, i)                                                       \
    case E:                                                                                        \
        return pe_load_##s(p, i);
static inline double pe_load(const char *p, ptrdiff_t i, int dtype)
{
    switch (dtype) {
        PE_DTYPES(PE_LOAD_CASE, p, i)
    default:
        return 0.0;
    }
}

/* A 16-bit element (float16 or bfloat16) widened to float32, exactly. */
static inline float pe_load16(uint16_t h, int dtype)
{
    return dtype == PE_BF16 ? pe_f32_from_bf16(h) : pe_f32_from_f16(h);
}

/* A float32 rounded to a 16-bit element (float16 or bfloat16). */
static inline uint16_t pe_store16(float f, int dtype)
{
    return dtype == PE_BF16 ? pe_bf16_from_f32(f) : pe_f16_from_f32(f);
}

/* Outputs from this size on are written with non-temporal stores on the
 * AVX2 path: they would not stay in cache, and reading their lines before
 * writing them would cost half as much traffic again. */
#define PE_STREAM_BYTES (8 << 20)

/* The table of kernels of one SIMD path (simd.h). */
struct pe_kernels;

/* ---- a cast (row.c) ---- */

/* out[j] = x[j], j < n: float32 values (float64 for a float64 out) each
 * rounded once to dtype (simd.h's pe_cast_row: as NumPy's astype, and
 * bfloat16 as ml_dtypes rounds). */
void pe_cast(const struct pe_kernels *k, const char *x, char *out, ptrdiff_t n, int dtype,
             int nthreads);

/* ---- sinusoid tables (sinusoid.c) ---- */

/* out row r (at out + r * row_stride bytes) = PE(pos[r]) for r < n_pos:
 * 2 * half elements of type dtype, contiguous, in the given layout.
 * Returns 0, or -1 if scratch memory could not be allocated (nothing is
 * written then). */
int pe_sinusoid(const struct pe_kernels *k, const double *pos, ptrdiff_t n_pos, const double *freq,
                ptrdiff_t half, int layout, int dtype, char *out, ptrdiff_t row_stride,
                int nthreads);

/* ---- rotary position embedding (rope.c) ---- */

/* Which elements of a row form the rotated pairs: (x[i], x[i + half]) as in
 * GPT-NeoX and Llama in transformers, or (x[2i], x[2i + 1]) as in GPT-J.
 * The last two change the layout as they rotate: pairs read at (x[2i],
 * x[2i + 1]) and written at (o[i], o[i + half]), as DeepSeek-V3 rotates,
 * and back (its exact inverse); apply_rope only, its tables are "half". */
enum pe_rope_layout {
    PE_ROPE_HALF = 0,
    PE_ROPE_INTERLEAVED = 1,
    PE_ROPE_INTERLEAVED_TO_HALF = 2,
    PE_ROPE_HALF_TO_INTERLEAVED = 3
};
#define PE_ROPE_NLAYOUTS 4

/* xPos (Sun et al. 2022): cos and sin of pair i at position p times
 * exp(log_zeta[i] * (p - centre) * rate), formed in float64 (rate is
 * +-1/scale_base, its sign the role and direction); log_zeta NULL: none. */
struct pe_xpos {
    const double *log_zeta;
    double centre, rate;
};

/* Most leading dimensions an array handed to pe_rope_apply may have. */
#define PE_ROPE_MAXDIM 64

/* x and out: ndim leading dimensions of the given shape and byte strides
 * (any sign, out may be x itself), then a contiguous last axis of dim
 * elements of type dtype.  pos: a float64 position per row, at byte strides
 * pos_strides over the same leading shape (0 where it is broadcast).  The
 * first 2 * half elements of each row are rotated by pos * freq[i] (the
 * inverse rotation if inverse), cos and sin scaled by scale; the rest are
 * copied. */
struct pe_rope_args {
    int ndim;
    const ptrdiff_t *shape;
    const char *x;
    const ptrdiff_t *x_strides;
    char *out;
    const ptrdiff_t *out_strides;
    const char *pos;
    const ptrdiff_t *pos_strides;
    ptrdiff_t dim;
    const double *freq;
    ptrdiff_t half;
    double scale;
    int inverse, layout, dtype;
    /* Positions in channels (M-RoPE, axial RoPE), or channel NULL for one
     * position per row: pair i of a row is rotated by the position of
     * channel[i] (0 <= channel[i] < nchan <= PE_ROPE_MAXCHAN), found
     * chan_stride bytes times channel[i] past the row's position. */
    const int32_t *channel;
    int nchan;
    ptrdiff_t chan_stride;
    /* xPos factors (not with channels) */
    struct pe_xpos xpos;
};

/* Most position channels (rows of M-RoPE or axial positions). */
#define PE_ROPE_MAXCHAN 16

/* 0 on success, -1 if scratch memory could not be allocated (nothing is
 * written then), -2 on arguments out of range. */
int pe_rope_apply(const struct pe_kernels *k, const struct pe_rope_args *args, int nthreads);

/* Row r of cos_out / sin_out (at byte strides cos_stride / sin_stride):
 * scale * cos / sin of pos[r] * freq[i] (times the xPos factor of xpos),
 * each value twice in the given layout, 2 * half elements of type dtype, or
 * once (half elements, as flash-attn takes them) unless full.  With channel
 * (not NULL), pair i takes the position pos[channel[i] * n + r] instead
 * (nchan rows of n positions, as in struct pe_rope_args; full tables
 * without xPos only).  0, or -1 on allocation failure, -2 on arguments out
 * of range. */
int pe_rope_table(const struct pe_kernels *k, const double *pos, ptrdiff_t n, const double *freq,
                  ptrdiff_t half, double scale, int layout, int dtype, char *cos_out,
                  ptrdiff_t cos_stride, char *sin_out, ptrdiff_t sin_stride, const int32_t *channel,
                  int nchan, const struct pe_xpos *xpos, int full, int nthreads);

/* ---- attention biases (bias.c) ---- */

/* A (batch, heads, q_len, k_len) array that a bias is written into (a fill,
 * batch 1) or added into (scores).  Strides are in bytes and may be
 * negative; the last axis is contiguous and no two elements overlap. */
struct pe_bias_dst {
    char *data;
    ptrdiff_t batch, heads, q_len, k_len;
    ptrdiff_t stride_b, stride_h, stride_q;
    int dtype; /* enum pe_dtype, or PE_BIAS_I64 for relative positions */
};

/* Element type of relative_positions() tables (fills only). */
#define PE_BIAS_I64 PE_NDTYPES

/* The largest |q_offset| of the bias kernels: distances stay exact in
 * float64 (ALiBi's slope times distance) below it. */
#define PE_MAX_Q_OFFSET ((int64_t)1 << 53)

/* T5 bucketing: the largest num_buckets and max_distance accepted. */
#define PE_T5_MAX_BUCKETS (1 << 24)
#define PE_T5_MAX_DISTANCE ((int64_t)1 << 62)

/* ALiBi: element (i, j) of head h is slopes[h] * (j - (q_offset + i)) for
 * keys at or before the query and -inf after it (causal), or
 * slopes[h] * -|j - (q_offset + i)| (not causal).  add != 0: added into
 * dst, else written.  Returns 0, or -1 if memory ran out (nothing written). */
int pe_alibi(const struct pe_kernels *k, const double *slopes, int causal, int64_t q_offset,
             const struct pe_bias_dst *dst, int add, int nthreads);

/* A bias given by its values: element (i, j) of head h is
 * values[h * vlen + q_len - 1 - i + j] rounded once to dst's dtype, values
 * float64 (heads, vlen = q_len + k_len - 1), C-contiguous. */
struct pe_bias_given {
    const double *values;
    ptrdiff_t vlen;
};

/* The bias of `given` added into dst (add != 0) or written.  Returns 0, or
 * -1 if memory ran out (nothing written). */
int pe_bias_given(const struct pe_kernels *k, const struct pe_bias_given *given,
                  const struct pe_bias_dst *dst, int add, int nthreads);

/* FIRE (Li et al., 2024) on the rows of queries past its threshold: element
 * (i, j) of head h is w2[h] . max(x * w1 + b1, 0) + b2[h] with
 * x = psi[q_len - 1 - i + j] / norm[i] (psi: psi(|qpos - j|) per diagonal,
 * norm: psi(max(qpos, L)) + eps per query, both made by the caller), each
 * value formed in float64 as posenc/functional_bias.py's fire_tile forms it
 * (the second layer summed over the hidden units in order, then b2) and
 * rounded once; -inf for keys after qpos = q_offset + i when causal.  All
 * arrays float64, C-contiguous: w1, b1 (width,), w2 (heads, width), b2
 * (heads,). */
struct pe_fire {
    const double *norm, *psi;
    const double *w1, *b1, *w2, *b2;
    ptrdiff_t width, heads;
    int64_t q_offset;
    int causal;
    /* set by pe_fire_rows: whether a hidden unit that is 0 at every key of
     * a block may be left out of its sums (fire.c says when) */
    int skip_zeros;
};

/* FIRE's rows (struct pe_fire) added into dst (add != 0) or written.
 * Returns 0, or -1 if memory ran out (nothing written). */
int pe_fire_rows(const struct pe_kernels *k, const struct pe_fire *f, const struct pe_bias_dst *dst,
                 int add, int nthreads);

/* T5: element (i, j) of head h is table[bucket(j - (q_offset + i)), h],
 * table a C-contiguous (num_buckets, heads) array of table_dtype, bucket as
 * pe_t5_buckets.  Returns 0, or -1 if memory ran out (nothing written). */
int pe_t5_bias(const struct pe_kernels *k, const void *table, int table_dtype,
               ptrdiff_t num_buckets, int bidirectional, const int64_t *thresh, ptrdiff_t nthresh,
               int64_t q_offset, const struct pe_bias_dst *dst, int add, int nthreads);

/* T5's backward pass: out[b, h] = the sum of grad[., h, i, j] over the
 * (i, j) whose distance j - (q_offset + i) has bucket b (as pe_t5_bias).
 * grad: the dst of the bias it is the gradient of (read only; any
 * pe_dtype); out: a C-contiguous (num_buckets, heads) array of float64
 * (acc64) or float32, in which the sums are made, each in a fixed order
 * (the same bits for any thread count and either path).  Returns 0, or -1
 * if memory ran out. */
int pe_t5_table_grad(const struct pe_kernels *k, const struct pe_bias_dst *grad,
                     ptrdiff_t num_buckets, int bidirectional, const int64_t *thresh,
                     ptrdiff_t nthresh, int64_t q_offset, int acc64, char *out, int nthreads);

/* Shaw et al.: element (i, j) = clip(j - (q_offset + i), -max_distance,
 * max_distance), no clipping for max_distance < 0; dst of PE_BIAS_I64,
 * batch and heads 1.  Returns 0, or -1 if memory ran out. */
int pe_relative_positions(const struct pe_kernels *k, int64_t max_distance, int64_t q_offset,
                          const struct pe_bias_dst *dst, int nthreads);

/* out[i] = T5's bucket of rel[i]: per direction (num_buckets, halved when
 * bidirectional, positive distances in the upper half) the first half of
 * the buckets hold one distance each (exact = per_dir / 2), a distance
 * a >= exact has bucket exact + #{k : thresh[k] <= a}.  thresh: nthresh
 * non-decreasing distances, exact arithmetic's steps (posenc/_t5.py), covering
 * every |rel| given.  2 <= num_buckets <= PE_T5_MAX_BUCKETS.  Returns 0. */
int pe_t5_buckets(const int64_t *rel, ptrdiff_t n, int bidirectional, int64_t num_buckets,
                  const int64_t *thresh, ptrdiff_t nthresh, int64_t *out, int nthreads);

/* ---- contextual position encoding (cope.c) ---- */

/* One call: the logits, (batch, heads, q_len, k_len) as dst, of float16,
 * 32 or 64 (read only; their elements may overlap), or with gates set
 * their gates themselves (float64); the queries, a row of d per row of dst
 * (batch * heads * q_len rows, float16, 32 or 64, rows query_stride bytes
 * apart), and the table transposed, et (d, npos) float64 C-contiguous,
 * whose products are the logits of the integer positions z (cope.h); dst
 * the scores (add) or the output (written).  causal: the keys j >
 * q_offset + i have gate 0. */
struct pe_cope {
    struct pe_bias_dst logits;
    const struct pe_bias_dst *dst;
    const char *query;
    ptrdiff_t query_stride, d;
    int query_dtype;
    const double *et;
    int64_t npos, q_offset;
    int causal, add, gates;
};

/* CoPE's position logits of `c` (cope.h) added into (c->add) or written
 * as c->dst, on the path of k.  Returns 0, -1 if memory ran out or -2 if a
 * logit (a gate) is nan or +inf (nothing is written then: every one is
 * looked at first). */
int pe_cope(const struct pe_kernels *k, const struct pe_cope *c, int nthreads);

/* One backward call (cope_grad): the logits and the incoming gradient,
 * (rows, k_len) each, of float16, 32 or 64, rows lstride and gstride bytes
 * apart with a contiguous last axis (read only); the queries, the table et
 * and npos as struct pe_cope's, and the table itself, table (npos, d)
 * float64 C-contiguous; row r is query i = r % q_len.  Written, each
 * rounded once: the gradient of the logits, d_logits (rows, k_len) of
 * float16, 32 or 64, rows dstride bytes apart; of the queries, d_query
 * (rows, d) of float16, 32 or 64, rows dq_stride bytes apart; of the table,
 * d_table (npos, d) float64 C-contiguous.  causal and q_offset as pe_cope's
 * (q_offset within [-q_len, k_len]).  dz, q64 and pmax are the kernel's
 * own. */
struct pe_cope_grad {
    const char *logits, *grad;
    char *d_logits, *d_query;
    ptrdiff_t rows, q_len, k_len, lstride, gstride, dstride, dq_stride;
    int logits_dtype, grad_dtype, d_dtype, dq_dtype;
    const char *query;
    ptrdiff_t query_stride, d;
    int query_dtype;
    const double *et, *table;
    int64_t npos, q_offset;
    int causal;
    double *d_table;
    /* the gradient of z (rows, npos), the queries in float64 (rows, d) and
     * each row's largest position index (set by pe_cope_grad) */
    double *dz, *q64;
    int64_t *pmax;
};

/* CoPE's backward of `g` (cope.c), with the bits of posenc/_cope.py's
 * grad_numpy: the gates and positions of each row again, the gradient of
 * z scattered into each key's floor and ceil positions (the ceil's sums
 * and the floor's, each in the order of the keys, then added), the
 * gradient of the positions summed back into the gates (in the order of
 * the keys) times sigmoid'; then the gradients of the queries and of the
 * table from that of z, each sum from 0 in the order of the positions (of
 * the rows), over the positions up to the row's largest (the ceil of its
 * first key's, beyond which its gradient of z is 0).  Returns 0, -1 if
 * memory ran out, -2 if a logit is nan or +inf, -3 if a gradient is not
 * finite (nothing is written then: every one is looked at first). */
int pe_cope_grad(const struct pe_kernels *k, const struct pe_cope_grad *g, int nthreads);

/* z = q et (pe_cope_z_rows) on the path of k, on the library's threads: the
 * logits of the integer positions, without BLAS (whose threads, waiting
 * after a call, would take the cores from the kernel that follows). */
void pe_cope_products(const struct pe_kernels *k, const double *q, const double *et, ptrdiff_t rows,
                      ptrdiff_t d, ptrdiff_t npos, double *z, int nthreads);

/* g[t] = pe_cope_gate(a[t]) (or with exp_only, pe_cope_exp(a[t]), a[t] <=
 * 0), t < n, on the library's threads. */
void pe_cope_gates(const double *a, double *g, ptrdiff_t n, int exp_only, int nthreads);

#endif
