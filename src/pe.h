/*
 * pe.h -- what the kernel files share: element types (float16 conversion
 * in half.h), the float64 sine/cosine kernel and the entry points the glue
 * calls.
 *
 * Kernels take plain pointers, lengths and strides.  They never see a
 * Python object, so they can run with the GIL released and be called from
 * C tests as they are.
 */
#ifndef PE_H
#define PE_H

#include <stddef.h>
#include <stdint.h>

#include "half.h"

/* Element type of a table written or an array transformed. */
enum pe_dtype { PE_F16 = 0, PE_F32 = 1, PE_F64 = 2 };

/* Layout of a sinusoid row: sin/cos pairs, or all sines then all cosines. */
enum pe_layout { PE_INTERLEAVED = 0, PE_CONCAT = 1 };

/* Below this many output elements a kernel runs on one thread: waking the
 * OpenMP team costs more than the work. */
#define PE_PARALLEL_MIN 32768

/* ---- elements of any type ---- */

/* Bytes of an element of type dtype (an enum pe_dtype; 8 for any other
 * 8-byte type). */
static inline size_t pe_itemsize(int dtype)
{
    return dtype == PE_F16 ? 2 : dtype == PE_F32 ? 4 : 8;
}

/* v rounded once to dtype, stored as element i of p. */
static inline void pe_store(char *p, ptrdiff_t i, int dtype, double v)
{
    if (dtype == PE_F64)
        ((double *)p)[i] = v;
    else if (dtype == PE_F32)
        ((float *)p)[i] = (float)v;
    else
        ((uint16_t *)p)[i] = pe_f16_from_f64(v);
}

/* ---- sine and cosine in float64 (sincos.c) ---- */

/* Tables made by rotation (sinusoid.c, rope.c) compute every PE_ANCHOR-th
 * row exactly and rotate the rows between. */
#define PE_ANCHOR 32

/* s[i] = sin(pos * freq[i]), c[i] = cos(pos * freq[i]) for i < n.
 * The angle is the float64 product, reduced with a three-part pi/2 and FMA,
 * so the result is within ~1 ulp of sin/cos of that product for
 * |angle| < 2**50. */
void pe_sincos_row(double pos, const double *freq, ptrdiff_t n, double *s, double *c);

/* Advances a row of (s[i], c[i]) = sin, cos of some angle a_i to a_i + d_i
 * = pos * freq[i], given sd[i], cd[i] = sin, cos of d_i, with a product
 * and an FMA in float64 for each (in the same order on every path, so every
 * path gives the same bits).  A new value
 * whose magnitude is below m * freq[i] + 2**-20 carries too large a
 * relative error: that pair is recomputed from pos * freq[i] directly. */
void pe_sincos_rotate_row(double *s, double *c, const double *sd, const double *cd,
                          const double *freq, double pos, double m, ptrdiff_t n);

/* A group of rows of sin and cos made by pe_sincos_group: the rows of one
 * cell of the anchor grid (PE_ANCHOR consecutive indices along the axis the
 * positions vary on, counted from index 0 of the caller's array, never from
 * a tile or a thread's share), so that which rows are rotated, and their
 * bits, do not depend on tiling, threads or memory layout. */
struct pe_rotor {
    double *s, *c;   /* the current row (half each) */
    double *sd, *cd; /* sin and cos of the step last rotated by (half each) */
    double step;     /* that step; NaN: none yet */
};

/* Called with each row of a group, in order: j its index in the group. */
typedef void (*pe_row_fn)(void *ctx, ptrdiff_t j, const double *s, const double *c);

/* Rows j < n of sin and cos of pos_j * freq[i] (pos_j the double at pos + j
 * * stride bytes), handed to emit one after the other.  If rotate is set,
 * the positions are an exact arithmetic progression (pe_progression), n > 2
 * and M wmax 2**-26 <= PE_ROTATE_MAX (M the largest |pos_j|, wmax the
 * largest freq[i]), row 0 is computed directly and the others by rotation
 * with the floor of pe_sincos_rotate_row at m = M 2**-26: within half a
 * float32 ulp of the direct values before rounding, so float32 and float16
 * tables stay within 1 ulp.  Otherwise every row is direct (float64 tables
 * ask for that). */
/* Whether the rows of such a group are rotated (the test pe_sincos_group
 * applies), with *m = M 2**-26 then and rt->sd, rt->cd holding sin and cos
 * of the step.  For kernels that fuse the rotation (pe_rotate4) with their
 * stores. */
int pe_group_rotates(struct pe_rotor *rt, const char *pos, ptrdiff_t stride, ptrdiff_t n,
                     const double *freq, ptrdiff_t half, double wmax, int rotate, double *m);

void pe_sincos_group(struct pe_rotor *rt, const char *pos, ptrdiff_t stride, ptrdiff_t n,
                     const double *freq, ptrdiff_t half, double wmax, int rotate, pe_row_fn emit,
                     void *ctx);

/* Rotation is not used once M * max(w) * 2**-26 passes this: too many values
 * would fall below the floor and be recomputed. */
#define PE_ROTATE_MAX 0x1p-4

/* The largest |freq[i]|, i < n. */
static inline double pe_max_abs(const double *freq, ptrdiff_t n)
{
    double m = 0.0;
    for (ptrdiff_t i = 0; i < n; ++i)
        m = (freq[i] > m ? freq[i] : -freq[i] > m ? -freq[i] : m);
    return m;
}

/* Whether the n doubles at p, p + stride, ... (bytes) are an arithmetic
 * progression whose every difference is exact (its rounding error, by
 * Knuth's two-sum, is zero), so that stepping by the difference lands on
 * each value exactly; the difference goes to *step. */
static inline int pe_progression(const char *p, ptrdiff_t stride, ptrdiff_t n, double *step)
{
    if (n < 2)
        return 0;
    double prev = *(const double *)p, d = *(const double *)(p + stride) - prev;
    for (ptrdiff_t r = 1; r < n; ++r) {
        double a = *(const double *)(p + r * stride), b = -prev, sum = a + b;
        double a1 = sum - b, b1 = sum - a1;
        if (sum != d || (a - a1) + (b - b1) != 0.0)
            return 0;
        prev = a;
    }
    *step = d;
    return 1;
}

/* ---- streamed stores (sincos.c; AVX2 path only) ---- */

/* Outputs from this size on are written with non-temporal stores: they
 * would not stay in cache, and reading their lines before writing them
 * would cost half as much traffic again. */
#define PE_STREAM_BYTES (8 << 20)

/* bytes (a multiple of 16) from src to 16-byte aligned dst, with
 * non-temporal stores; pe_stream_fence() orders them before the call
 * returns.  Only where pe_use_avx2(). */
void pe_stream_copy(char *dst, const char *src, ptrdiff_t bytes);
void pe_stream_fence(void);

/* ---- sinusoid tables (sinusoid.c) ---- */

/* out row r (at out + r * row_stride bytes) = PE(pos[r]) for r < n_pos:
 * 2 * half elements of type dtype, contiguous, in the given layout.
 * Returns 0, or -1 if scratch memory could not be allocated (nothing is
 * written then). */
int pe_sinusoid(const double *pos, ptrdiff_t n_pos, const double *freq, ptrdiff_t half, int layout,
                int dtype, char *out, ptrdiff_t row_stride, int nthreads);

/* ---- rotary position embedding (rope.c) ---- */

/* Which elements of a row form the rotated pairs: (x[i], x[i + half]) as in
 * GPT-NeoX and Llama in transformers, or (x[2i], x[2i + 1]) as in GPT-J. */
enum pe_rope_layout { PE_ROPE_HALF = 0, PE_ROPE_INTERLEAVED = 1 };

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
};

/* 0 on success, -1 if scratch memory could not be allocated (nothing is
 * written then), -2 on arguments out of range. */
int pe_rope_apply(const struct pe_rope_args *args, int nthreads);

/* Row r of cos_out / sin_out (at byte strides cos_stride / sin_stride):
 * scale * cos / sin of pos[r] * freq[i], each value twice in the given
 * layout, 2 * half elements of type dtype.  0, or -1 on allocation failure. */
int pe_rope_table(const double *pos, ptrdiff_t n, const double *freq, ptrdiff_t half, double scale,
                  int layout, int dtype, char *cos_out, ptrdiff_t cos_stride, char *sin_out,
                  ptrdiff_t sin_stride, int nthreads);

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
#define PE_BIAS_I64 3

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
int pe_alibi(const double *slopes, int causal, int64_t q_offset, const struct pe_bias_dst *dst,
             int add, int nthreads);

/* T5: element (i, j) of head h is table[bucket(j - (q_offset + i)), h],
 * table a C-contiguous (num_buckets, heads) array of table_dtype, bucket as
 * pe_t5_buckets.  Returns 0, or -1 if memory ran out (nothing written). */
int pe_t5_bias(const void *table, int table_dtype, ptrdiff_t num_buckets, int bidirectional,
               const int64_t *thresh, ptrdiff_t nthresh, int64_t q_offset,
               const struct pe_bias_dst *dst, int add, int nthreads);

/* Shaw et al.: element (i, j) = clip(j - (q_offset + i), -max_distance,
 * max_distance), no clipping for max_distance < 0; dst of PE_BIAS_I64,
 * batch and heads 1.  Returns 0, or -1 if memory ran out. */
int pe_relative_positions(int64_t max_distance, int64_t q_offset, const struct pe_bias_dst *dst,
                          int nthreads);

/* out[i] = T5's bucket of rel[i]: per direction (num_buckets, halved when
 * bidirectional, positive distances in the upper half) the first half of
 * the buckets hold one distance each (exact = per_dir / 2), a distance
 * a >= exact has bucket exact + #{k : thresh[k] <= a}.  thresh: nthresh
 * non-decreasing distances, exact arithmetic's steps (posenc/_t5.py), covering
 * every |rel| given.  2 <= num_buckets <= PE_T5_MAX_BUCKETS.  Returns 0. */
int pe_t5_buckets(const int64_t *rel, ptrdiff_t n, int bidirectional, int64_t num_buckets,
                  const int64_t *thresh, ptrdiff_t nthresh, int64_t *out, int nthreads);

#endif
