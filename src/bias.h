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

/* dst[j] += src[j] for j < n; float16 widened to float32, added and rounded
 * once, the correctly rounded float16 sum. */
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
            o[j] = pe_f16_from_f32(pe_f32_from_f16(o[j]) + pe_f32_from_f16(s[j]));
    }
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
