/*
 * bias.h -- what bias.c and bias_avx2.c share: the rows of a bias as
 * slices of its heads' vectors, the portable add of a row, and the values
 * of an ALiBi vector.
 */
#ifndef PE_BIAS_H
#define PE_BIAS_H

#include <math.h>
#include <string.h>

#include "pe.h"
#include "simd.h"

/* Elements of a head's vector per OpenMP task. */
#define PE_VECTOR_BLOCK 4096

/* How rows are made from the vectors: written (a copy of the slice) or
 * added into scores; the first index of the table's bias_rows. */
enum { PE_BIAS_WRITE = 0, PE_BIAS_ADD = 1 };

/* The rows of dst made from the per-head vectors vals (heads x vlen
 * elements of dst's type, vlen = q_len + k_len - 1): row i of head h is
 * the slice that starts at q_len - 1 - i.  Rows of all batches and heads
 * are one flat range, r = (b * heads + h) * q_len + i. */
struct pe_toeplitz {
    const struct pe_bias_dst *d;
    const char *vals;
    ptrdiff_t vlen;
    int stream; /* a large write: non-temporal stores where the path has them */
};

/* Row r of the destination, and (*src) the slice it is made from. */
PE_INLINE char *pe_toeplitz_row(const struct pe_toeplitz *t, ptrdiff_t r, size_t isz,
                                const char **src)
{
    const struct pe_bias_dst *d = t->d;
    ptrdiff_t q = d->q_len, hq = d->heads * q;
    ptrdiff_t b = r / hq, h = (r / q) % d->heads, i = r % q;
    *src = t->vals + (h * t->vlen + (q - 1 - i)) * (ptrdiff_t)isz;
    return d->data + b * d->stride_b + h * d->stride_h + i * d->stride_q;
}

/* dst[j] += src[j] for j < n; float16 and bfloat16 widened to float32,
 * added and rounded once: the correctly rounded float16 or bfloat16 sum
 * (float32 has more than twice their bits, plus two). */
PE_INLINE void pe_add_row(char *dst, const char *src, ptrdiff_t n, const int dtype)
{
    if (dtype == PE_F32) {
        float *o = (float *)dst;
        const float *s = (const float *)src;
        for (ptrdiff_t j = 0; j < n; ++j)
            o[j] = o[j] + s[j];
    } else if (dtype == PE_F64) {
        double *o = (double *)dst;
        const double *s = (const double *)src;
        for (ptrdiff_t j = 0; j < n; ++j)
            o[j] = o[j] + s[j];
    } else {
        uint16_t *o = (uint16_t *)dst;
        const uint16_t *s = (const uint16_t *)src;
        for (ptrdiff_t j = 0; j < n; ++j)
            o[j] = pe_store16(pe_load16(o[j], dtype) + pe_load16(s[j], dtype), dtype);
    }
}

/* ---- T5's backward pass: a gradient summed along its diagonals ---- */

/* Element (b, h, i, j) of a gradient g (read only) lies on the diagonal
 * t = q_len - 1 - i + j of head h: sums + (h * vlen + t) elements, of
 * float32 or float64 (the first index of the table's diagonals).  A row of
 * g is added into a slice of them, rows of head h in the order b, i. */
struct pe_diagonals {
    const struct pe_bias_dst *g;
    char *sums;
    ptrdiff_t vlen;
};

/* acc[j] += row[j] for j in [j0, n), in float64 (acc64) or float32: each
 * sum its own chain of additions, so the vector kernels, which do eight
 * or four of them side by side, give the same bits. */
PE_INLINE void pe_diagonal_add(char *acc, const char *row, ptrdiff_t j0, ptrdiff_t n,
                               const int acc64, const int dtype)
{
    if (acc64) {
        double *a = (double *)acc;
        for (ptrdiff_t j = j0; j < n; ++j)
            a[j] = a[j] + pe_load(row, j, dtype);
    } else {
        float *a = (float *)acc;
        for (ptrdiff_t j = j0; j < n; ++j)
            a[j] = a[j] + (float)pe_load(row, j, dtype);
    }
}

/* Row i of batch b of head h in g, and (*acc) the slice of sums it is
 * added into. */
PE_INLINE const char *pe_diagonal_row(const struct pe_diagonals *s, ptrdiff_t b, ptrdiff_t h,
                                      ptrdiff_t i, const int acc64, char **acc)
{
    const struct pe_bias_dst *g = s->g;
    ptrdiff_t asz = acc64 ? 8 : 4;
    *acc = s->sums + (h * s->vlen + (g->q_len - 1 - i)) * asz;
    return g->data + b * g->stride_b + h * g->stride_h + i * g->stride_q;
}

/* ---- ALiBi ---- */

/* slope * (j - qpos) for keys at or before the query and -inf after it
 * (causal), or slope * -|j - qpos|: +0.0 on the diagonal for a positive
 * slope. */
PE_INLINE double pe_alibi_value(double dist, double slope, const int causal)
{
    double below = slope * dist, above = causal ? -INFINITY : slope * -dist;
    return dist > 0 ? above : below;
}

/* Whether the distances of a block starting at d0 are far enough below
 * 2**53 to be counted in float64, exactly. */
PE_INLINE int pe_alibi_counts(int64_t d0)
{
    return d0 > -((int64_t)1 << 52) && d0 < ((int64_t)1 << 52) - PE_VECTOR_BLOCK;
}

/* Elements [t0 + t, t0 + n) of a head's vector, the distance at t0 being
 * base (pe_alibi_counts), or, with !counted, d0 in int64. */
PE_INLINE void pe_alibi_tail(char *o, ptrdiff_t t0, ptrdiff_t t, ptrdiff_t n, int64_t d0,
                             double slope, const int counted, const int causal, const int dtype)
{
    double base = (double)d0;
    for (; t < n; ++t) {
        double dist = counted ? base + (double)t : (double)(d0 + t);
        pe_store(o, t0 + t, dtype, pe_alibi_value(dist, slope, causal));
    }
}

#endif
