/*
 * relative.h -- the relative terms that live inside attention
 * (Transformer-XL / XLNet, TENER, DeBERTa, Shaw et al.): the gather of a
 * small matrix of products into attention scores by relative distance, and
 * its transpose, the scatter of attention weights by relative distance.
 */
#ifndef PE_RELATIVE_H
#define PE_RELATIVE_H

#include <stddef.h>
#include <stdint.h>

#include "pe.h"

/* A (batch, heads, rows, width) array of products -- a query's or a key's
 * row against every row of a relative table -- of float32 (added into
 * float16 or float32 scores) or float64 (into float64 scores).  rows is
 * q_len (by_key 0: the products of query i) or k_len (by_key 1: those of
 * key j).  Strides in bytes; stride_b is 0 where one batch serves all;
 * the last axis is contiguous. */
struct pe_rel_src {
    const char *data;
    ptrdiff_t batch, rows, width;
    ptrdiff_t stride_b, stride_h, stride_r;
    int by_key;
};

/* The column of the products each distance reads: map[t] for
 * t = q_len - 1 - i + j (q_len + k_len - 1 entries), in [-1, width); -1
 * leaves the score as it is (a key the table does not reach, such as a
 * future key of a causal model). */

/* dst[b, h, i, j] += src[b, h, r, map[q_len - 1 - i + j]] with r = i or j
 * (src->by_key), the product rounded to dst's type and added with one
 * rounding (float16 through float32, as NumPy adds float16 arrays).  0, or -1 if memory
 * ran out (nothing written). */
int pe_rel_gather_add(const struct pe_rel_src *src, const int64_t *map,
                      const struct pe_bias_dst *dst, int nthreads);

/* The transpose, for weights w (batch, heads, q_len, k_len) of float16,
 * float32 or float64 (C-contiguous): out[b, h, i, map[t]] += w[b, h, i, j],
 * out a C-contiguous (batch, heads, q_len, width) array of out_dtype
 * (PE_F32 or PE_F64), summed in that type in the order of j.  0, or -1 if
 * memory ran out (nothing written). */
int pe_rel_scatter_add(const char *w, int w_dtype, ptrdiff_t batch, ptrdiff_t heads,
                       ptrdiff_t q_len, ptrdiff_t k_len, const int64_t *map, char *out,
                       int out_dtype, ptrdiff_t width, int nthreads);

#endif
