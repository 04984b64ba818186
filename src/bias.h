/*
 * bias.h -- what bias.c and bias_avx2.c share: the rows of a bias as
 * slices of its heads' vectors (each row added with simd.h's pe_row_add),
 * and the values of an ALiBi vector.
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

/* Rows [r0, r1) of t: written (copies of their slices) or added into the
 * scores (op PE_BIAS_ADD) by add, a path's body of pe_row_add (a constant,
 * inlined): the portable and the NEON bias_rows. */
PE_INLINE void pe_toeplitz_rows(const struct pe_toeplitz *t, ptrdiff_t r0, ptrdiff_t r1,
                                void (*add)(char *, const char *, ptrdiff_t, int, int),
                                const int op, const int dtype)
{
    const size_t isz = pe_itemsize(dtype);
    ptrdiff_t k = t->d->k_len;
    for (ptrdiff_t r = r0; r < r1; ++r) {
        const char *src;
        char *row = pe_toeplitz_row(t, r, isz, &src);
        if (op == PE_BIAS_ADD)
            add(row, src, k, PE_ROW_SAME, dtype);
        else
            memcpy(row, src, (size_t)k * isz);
    }
}

/* ---- T5's backward pass: a gradient summed along its diagonals ---- */

/* Rows of a gradient whose elements are summed along each diagonal before
 * the sum is added into the diagonal's: the sums are read and written once
 * per tile of rows, not once per row. */
#define PE_DIAG_TILE 8

/* Element (b, h, i, j) of a gradient g (read only) lies on the diagonal
 * t = q_len - 1 - i + j of head h, whose sum is element h * vlen + t of
 * sums, float32 or float64 (the first index of the table's diagonals).  The
 * rows of a head are taken PE_DIAG_TILE at a time, batch after batch,
 * queries in order; for each diagonal, the elements of a tile on it are
 * summed in the order of i, starting from 0, and that added into its sum:
 * a fixed order, the same on every path. */
struct pe_diagonals {
    const struct pe_bias_dst *g;
    char *sums;
    ptrdiff_t vlen;
};

/* A tile of rows: row m (query i0 + m, m < r) at row0 + m * stride, its
 * element j on the diagonal base - m + j (base = q_len - 1 - i0), whose sum
 * is at sums (the head's) + that many elements. */
struct pe_diag_tile {
    const char *row0;
    ptrdiff_t stride, r, k, base;
    char *sums;
};

PE_INLINE struct pe_diag_tile pe_diagonal_tile(const struct pe_diagonals *s, ptrdiff_t b,
                                               ptrdiff_t h, ptrdiff_t i0, const int acc64)
{
    const struct pe_bias_dst *g = s->g;
    struct pe_diag_tile w = {
        g->data + b * g->stride_b + h * g->stride_h + i0 * g->stride_q,
        g->stride_q,
        g->q_len - i0 < PE_DIAG_TILE ? g->q_len - i0 : PE_DIAG_TILE,
        g->k_len,
        g->q_len - 1 - i0,
        s->sums + h * s->vlen * (acc64 ? 8 : 4),
    };
    return w;
}

/* Diagonals [t, t + 8) of a tile, which every row of it reaches, as
 * pe_diagonal_sums sums each (eight side by side, the rows read in runs). */
PE_INLINE void pe_diagonal_block8(const struct pe_diag_tile *w, ptrdiff_t t, const int acc64,
                                  const int dtype)
{
    double acc[8] = {0.0};
    float accf[8] = {0.0f};
    for (ptrdiff_t m = 0; m < w->r; ++m) {
        const char *row = w->row0 + m * w->stride;
        ptrdiff_t j = t - w->base + m;
        for (int l = 0; l < 8; ++l) {
            if (acc64)
                acc[l] = acc[l] + pe_load(row, j + l, dtype);
            else
                accf[l] = accf[l] + (float)pe_load(row, j + l, dtype);
        }
    }
    for (int l = 0; l < 8; ++l) {
        if (acc64)
            ((double *)w->sums)[t + l] = ((double *)w->sums)[t + l] + acc[l];
        else
            ((float *)w->sums)[t + l] = ((float *)w->sums)[t + l] + accf[l];
    }
}

/* Diagonals [t0, t1) of a tile one at a time, as struct pe_diagonals says:
 * the portable kernels, and the diagonals that the vector kernels' blocks
 * do not cover (those that only some rows of the tile reach). */
PE_INLINE void pe_diagonal_sums(const struct pe_diag_tile *w, ptrdiff_t t0, ptrdiff_t t1,
                                const int acc64, const int dtype)
{
    for (ptrdiff_t t = t0; t < t1; ++t) {
        double acc = 0.0;
        float accf = 0.0f;
        for (ptrdiff_t m = 0; m < w->r; ++m) {
            ptrdiff_t j = t - w->base + m;
            if (j < 0 || j >= w->k)
                continue;
            if (acc64)
                acc = acc + pe_load(w->row0 + m * w->stride, j, dtype);
            else
                accf = accf + (float)pe_load(w->row0 + m * w->stride, j, dtype);
        }
        if (acc64)
            ((double *)w->sums)[t] = ((double *)w->sums)[t] + acc;
        else
            ((float *)w->sums)[t] = ((float *)w->sums)[t] + accf;
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
