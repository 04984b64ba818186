/*
 * cope.h -- contextual position encoding (CoPE, Golovneva et al. 2024): the
 * position logits z_i(p_ij) added into (or written as) attention scores,
 * row by row, in float64 and rounded once, with the bits of the NumPy
 * formula of posenc/cope.py (_forward):
 *
 *   gate    g_it = (1 or e) / (1 + e), e = exp(-|a_it|) (the C library's
 *           exp, which NumPy calls), 1 where a_it >= 0; 0 for the keys
 *           after the query when causal
 *   p_ij    the sum of the gates from the row's end back to j, in that
 *           order (NumPy's cumsum of the reversed row), clipped at
 *           npos - 1
 *   bias    z[ceil(p)] * w + z[floor(p)] * (1 - w), w = p - floor(p)
 *
 * Gates are never negative, so p only grows as j goes back: once it
 * reaches npos - 1 every earlier key has that position, and its gates
 * need not be formed.  cope.c has the portable kernel, cope_avx2.c the
 * AVX2 one (the runs of one value added into the scores).
 */
#ifndef PE_COPE_H
#define PE_COPE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "pe.h"
#include "simd.h"

/* The gate of a logit a: 1 / (1 + e^-a) from one exponential that cannot
 * overflow, 0 at -inf, as posenc/cope.py's _sigmoid_of computes it. */
PE_INLINE double pe_cope_gate(double a)
{
    const double e = exp(-fabs(a));
    return (a >= 0 ? 1.0 : e) / (1.0 + e);
}

/* z[ceil(p)] * w + z[floor(p)] * (1 - w), 0 <= p <= npos - 1. */
PE_INLINE double pe_cope_value(const double *z, double p)
{
    const double lo = floor(p), hi = ceil(p);
    const double w = p - lo;
    const double a = z[(ptrdiff_t)hi] * w, b = z[(ptrdiff_t)lo] * (1.0 - w);
    return a + b;
}

/* o[j] = v rounded (write) or o[j] + v rounded once (add), j < n: the
 * portable run. */
PE_INLINE void pe_cope_run(char *o, ptrdiff_t n, double v, const int add, const int dtype)
{
    if (!add) {
        if (n < 1)
            return;
        pe_store(o, 0, dtype, v);
        if (dtype == PE_F64) {
            for (ptrdiff_t j = 1; j < n; ++j)
                ((double *)o)[j] = ((double *)o)[0];
        } else if (dtype == PE_F32) {
            for (ptrdiff_t j = 1; j < n; ++j)
                ((float *)o)[j] = ((float *)o)[0];
        } else {
            for (ptrdiff_t j = 1; j < n; ++j)
                ((uint16_t *)o)[j] = ((uint16_t *)o)[0];
        }
    } else if (dtype == PE_F64) {
        double *d = (double *)o;
        for (ptrdiff_t j = 0; j < n; ++j)
            d[j] = d[j] + v;
    } else if (dtype == PE_F32) {
        float *d = (float *)o;
        for (ptrdiff_t j = 0; j < n; ++j)
            d[j] = (float)((double)d[j] + v);
    } else {
        for (ptrdiff_t j = 0; j < n; ++j)
            pe_store(o, j, dtype, pe_load(o, j, dtype) + v);
    }
}

/* The run of one value of a path: o[j] = v or o[j] + v rounded once, j < n. */
typedef void (*pe_cope_run_fn)(char *o, ptrdiff_t n, double v, int add, int dtype);

/* Row r of the call: the gates from the last key the query sees back to
 * the first key whose position reaches npos - 1, each key's value stored
 * as soon as its position is known (after its own logit and the later
 * ones were read: scores may be the logits themselves), then the run of
 * the clipped keys and the run of the keys after the query (position 0),
 * by the path's run. */
PE_INLINE void pe_cope_row(const struct pe_cope *c, ptrdiff_t r, pe_cope_run_fn run, const int add,
                           const int dtype)
{
    const struct pe_bias_dst *d = c->dst;
    const ptrdiff_t q_len = d->q_len, k_len = d->k_len, i = r % q_len, bh = r / q_len;
    const ptrdiff_t h = bh % d->heads, b = bh / d->heads;
    char *o = d->data + b * d->stride_b + h * d->stride_h + i * d->stride_q;
    const struct pe_bias_dst *lg = &c->logits;
    const char *l = lg->data + b * lg->stride_b + h * lg->stride_h + i * lg->stride_q;
    const double *z = c->z + r * (ptrdiff_t)c->npos;
    const double top = (double)(c->npos - 1);
    /* the last key the query sees: the keys after it have gate 0 */
    int64_t last = (int64_t)k_len - 1;
    if (c->causal && c->q_offset + (int64_t)i < last)
        last = c->q_offset + (int64_t)i < -1 ? -1 : c->q_offset + (int64_t)i;
    double s = 0.0;
    ptrdiff_t j = (ptrdiff_t)last;
    for (; j >= 0; --j) {
        const double a = pe_load(l, j, lg->dtype);
        s = s + (c->gates ? a : pe_cope_gate(a));
        if (s >= top)
            break;
        const double v = pe_cope_value(z, s);
        pe_store(o, j, dtype, add ? pe_load(o, j, dtype) + v : v);
    }
    if (j >= 0)
        run(o, j + 1, pe_cope_value(z, top), add, dtype);
    const ptrdiff_t after = (ptrdiff_t)(last + 1);
    run(o + after * (ptrdiff_t)pe_itemsize(dtype), k_len - after, pe_cope_value(z, 0.0), add,
        dtype);
}

/* The table `table` of a path's kernels, [add][enum pe_dtype of dst]: rows
 * [r0, r1) by pe_cope_row with the path's run. */
#define PE_COPE_ROWS_TABLE(table, run)                                                             \
    PE_INLINE void table##_body(const struct pe_cope *c, ptrdiff_t r0, ptrdiff_t r1,               \
                                const int add, const int dtype)                                    \
    {                                                                                              \
        for (ptrdiff_t r = r0; r < r1; ++r)                                                        \
            pe_cope_row(c, r, run, add, dtype);                                                    \
    }                                                                                              \
    PE_SPECIALISE(const pe_cope_rows_fn, table, table##_body,                                      \
                  (const struct pe_cope *c, ptrdiff_t r0, ptrdiff_t r1), (c, r0, r1))

#endif
