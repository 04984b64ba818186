/*
 * cope.h -- contextual position encoding (CoPE, Golovneva et al. 2024): the
 * position logits z_i(p_ij) added into (or written as) attention scores,
 * row by row, in float64 and rounded once, with the bits of the NumPy
 * formula of posenc/cope.py (_forward, whose gates are pe_cope_gates'):
 *
 *   gate    g_it = (1 or e) / (1 + e), e = exp(-|a_it|) (posenc's exp,
 *           pe_cope_exp), 1 where a_it >= 0; 0 for the keys
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
#include <string.h>

#include "pe.h"
#include "simd.h"

/* exp(x) for x <= 0 (or nan), posenc's own, so that a vector path can
 * have the bits of this one: x = k ln 2 + r (Cody and Waite's two parts
 * of ln 2, the first exact in k times it), e^r by its Taylor series to
 * r^13 (its remainder below 2^-57 at |r| <= ln 2 / 2) summed as
 * 1 + r + r^2 q(r) with the rounding error of 1 + r carried, then times
 * 2^k in two exact powers of two (one rounding, into the subnormals
 * where e^x is one).  Within 1 ulp of e^x (tests/test_cope.py looks
 * from 0 down to the underflow); 0 below -746 and at -inf. */
#define PE_COPE_EXP_SHIFT 0x1.8p52 /* x + it - it: x rounded to an integer */
#define PE_COPE_LN2_HI 0x1.62e42feep-1
#define PE_COPE_LN2_LO 0x1.a39ef35793c76p-33
#define PE_COPE_INV_LN2 0x1.71547652b82fep0
/* 1 / n!, n = 2 .. 13: q(r) = c[0] + r (c[1] + r (...)) */
static const double pe_cope_exp_c[12] = {1.0 / 2,          1.0 / 6,           1.0 / 24,
                                         1.0 / 120,        1.0 / 720,         1.0 / 5040,
                                         1.0 / 40320,      1.0 / 362880,      1.0 / 3628800.0,
                                         1.0 / 39916800.0, 1.0 / 479001600.0, 1.0 / 6227020800.0};

/* 2^k for an integer -1022 <= k <= 1023 given as a double. */
PE_INLINE double pe_cope_pow2(double k)
{
    double m = k + (PE_COPE_EXP_SHIFT + 1023.0);
    uint64_t b;
    memcpy(&b, &m, sizeof b);
    b <<= 52; /* the low bits of m hold 1023 + k: the exponent field */
    memcpy(&m, &b, sizeof m);
    return m;
}

PE_INLINE double pe_cope_exp(double x)
{
    x = x < -746.0 ? -746.0 : x;
    const double k = (x * PE_COPE_INV_LN2 + PE_COPE_EXP_SHIFT) - PE_COPE_EXP_SHIFT;
    const double r = (x - k * PE_COPE_LN2_HI) - k * PE_COPE_LN2_LO;
    double q = pe_cope_exp_c[11];
    for (int n = 10; n >= 0; --n)
        q = pe_cope_exp_c[n] + r * q;
    const double hi = 1.0 + r, lo = (1.0 - hi) + r;
    const double e = hi + (lo + (r * r) * q);
    const double k1 = floor(k * 0.5), k2 = k - k1;
    return (e * pe_cope_pow2(k1)) * pe_cope_pow2(k2);
}

/* The gate of a logit a: 1 / (1 + e^-a) from one exponential that cannot
 * overflow, 0 at -inf (posenc/cope.py's _sigmoid_of calls it). */
PE_INLINE double pe_cope_gate(double a)
{
    const double e = pe_cope_exp(-fabs(a));
    return (a >= 0 ? 1.0 : e) / (1.0 + e);
}

/* sig[j] = pe_cope_gate(a[j]) and sneg[j] = pe_cope_gate(-a[j]), j0 <= j
 * < n, a the logits at l of dtype: one exponential for both (that of
 * -|a|), the bits of two calls.  The portable pe_cope_sig_fn, and the tail
 * of a vector one. */
PE_INLINE void pe_cope_sig_run(const char *l, int dtype, ptrdiff_t j0, ptrdiff_t n, double *sig,
                               double *sneg)
{
    for (ptrdiff_t j = j0; j < n; ++j) {
        const double a = pe_load(l, j, dtype), e = pe_cope_exp(-fabs(a));
        sig[j] = (a >= 0 ? 1.0 : e) / (1.0 + e);
        sneg[j] = (-a >= 0 ? 1.0 : e) / (1.0 + e);
    }
}

/* Rows [r0, r1) of z[r, p] = sum_k q[r, k] et[k, p], p < count <= npos
 * (q (rows, d), et (d, npos), z (rows, npos), float64 C-contiguous): for
 * each p the products added in the order of k, each rounded (no FMA), so
 * that a path may take several p at once, and any count, and keep the
 * bits.  The body of each path's cope_z. */
PE_INLINE void pe_cope_z_rows(const double *q, const double *et, ptrdiff_t d, ptrdiff_t npos,
                              ptrdiff_t count, double *z, ptrdiff_t r0, ptrdiff_t r1)
{
    for (ptrdiff_t r = r0; r < r1; ++r) {
        const double *qr = q + r * d;
        double *zr = z + r * npos;
        for (ptrdiff_t p = 0; p < count; ++p)
            zr[p] = qr[0] * et[p];
        for (ptrdiff_t k = 1; k < d; ++k) {
            const double a = qr[k], *e = et + k * npos;
            for (ptrdiff_t p = 0; p < count; ++p)
                zr[p] = zr[p] + a * e[p];
        }
    }
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

/* The keys of a row from j down that a path's vector loop takes (the
 * row's logits l, its scores o, its z), with s the sum of the later keys'
 * gates: it stores their values as pe_cope_row would and returns the key
 * it stopped before, s updated; it stops before a block whose last key
 * would reach npos - 1, which pe_cope_row's loop then takes.  NULL: none. */
typedef ptrdiff_t (*pe_cope_keys_fn)(const struct pe_cope *c, const char *l, char *o,
                                     const double *z, ptrdiff_t j, double *s, int add, int dtype);

/* Hints to fetch the lines of row r's logits and scores that its gates
 * likely walk (the last key it sees and the 2 npos before it, at
 * most 1024 keys: the gates are about 1/2 on average): the walk goes
 * backwards a few lines per row, too short a stream for the hardware to
 * see, and each of its loads would wait for memory. */
PE_INLINE void pe_cope_prefetch(const struct pe_cope *c, ptrdiff_t r)
{
#if PE_HAS_PREFETCH
    const struct pe_bias_dst *d = c->dst, *lg = &c->logits;
    const ptrdiff_t q_len = d->q_len, k_len = d->k_len, i = r % q_len, bh = r / q_len;
    const ptrdiff_t h = bh % d->heads, b = bh / d->heads;
    int64_t last = (int64_t)k_len - 1;
    if (c->causal && c->q_offset + (int64_t)i < last)
        last = c->q_offset + (int64_t)i;
    if (last < 0 || r >= d->batch * d->heads * q_len)
        return;
    const int64_t walk = c->npos > 512 ? 1024 : 2 * c->npos;
    const ptrdiff_t j0 = (ptrdiff_t)(last > walk ? last - walk : 0), j1 = (ptrdiff_t)last;
    const char *l = lg->data + b * lg->stride_b + h * lg->stride_h + i * lg->stride_q;
    const char *o = d->data + b * d->stride_b + h * d->stride_h + i * d->stride_q;
    const ptrdiff_t li = (ptrdiff_t)pe_itemsize(lg->dtype), oi = (ptrdiff_t)pe_itemsize(d->dtype);
    for (ptrdiff_t at = j0 * li; at <= j1 * li; at += 64)
        PE_PREFETCH(l + at);
    for (ptrdiff_t at = j0 * oi; at <= j1 * oi; at += 64)
        PE_PREFETCH_W(o + at);
#else
    (void)c, (void)r;
#endif
}

/* Row r of the call: the gates from the last key the query sees back to
 * the first key whose position reaches npos - 1 (by the path's `keys`
 * first, then one at a time), each key's value stored as soon as its
 * position is known (after its own logit and the later ones were read:
 * scores may be the logits themselves), then the run of the clipped keys
 * and the run of the keys after the query (position 0), by the path's run. */
PE_INLINE void pe_cope_row(const struct pe_cope *c, ptrdiff_t r, const double *z,
                           pe_cope_run_fn run, pe_cope_keys_fn keys, const int add, const int dtype)
{
    const struct pe_bias_dst *d = c->dst;
    const ptrdiff_t q_len = d->q_len, k_len = d->k_len, i = r % q_len, bh = r / q_len;
    const ptrdiff_t h = bh % d->heads, b = bh / d->heads;
    char *o = d->data + b * d->stride_b + h * d->stride_h + i * d->stride_q;
    const struct pe_bias_dst *lg = &c->logits;
    const char *l = lg->data + b * lg->stride_b + h * lg->stride_h + i * lg->stride_q;
    const double top = (double)(c->npos - 1);
    /* the last key the query sees: the keys after it have gate 0 */
    int64_t last = (int64_t)k_len - 1;
    if (c->causal && c->q_offset + (int64_t)i < last)
        last = c->q_offset + (int64_t)i < -1 ? -1 : c->q_offset + (int64_t)i;
    double s = 0.0;
    ptrdiff_t j = (ptrdiff_t)last;
    if (keys != NULL)
        j = keys(c, l, o, z, j, &s, add, dtype);
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

/* Doubles of scratch of pe_cope_grad_row. */
#define PE_COPE_GRAD_SCRATCH(k_len, npos, d) (3 * (k_len) + 3 * (npos) + (d))

/* The keys of a backward row in the order of the keys (pe_cope_grad_row's
 * second pass), the gradient g of dtype gdt and d_logits o of dtype odt (literal
 * where inlined: one loop per pair of dtypes).  The positions never grow
 * along the row (the gates are >= 0), so each ceil (floor) index takes its
 * keys in one run: its sum is kept in a register from 0 and stored when the
 * index moves on, the additions of grad_numpy's scatter in its order. */
PE_INLINE void pe_cope_grad_keys(const char *g, char *o, const double *z, const double *sig,
                                 const double *sneg, const double *pos, double *zh, double *zl,
                                 ptrdiff_t k_len, int64_t last, double top, const int gdt,
                                 const int odt)
{
    ptrdiff_t at_hi = 0, at_lo = 0, j = 0;
    double sum_hi = 0.0, sum_lo = 0.0, dgate = 0.0;
    for (; (int64_t)j <= last; ++j) {
        const double p = pos[j];
        const double clipped = p < top ? p : top;
        const double lo = floor(clipped), hi = ceil(clipped), w = clipped - lo;
        const ptrdiff_t ilo = (ptrdiff_t)lo, ihi = (ptrdiff_t)hi;
        const double gj = pe_load(g, j, gdt);
        if (ihi != at_hi || j == 0) {
            zh[at_hi] = sum_hi; /* (a first store of 0.0 at j = 0: zh's own) */
            at_hi = ihi;
            sum_hi = 0.0;
        }
        if (ilo != at_lo || j == 0) {
            zl[at_lo] = sum_lo;
            at_lo = ilo;
            sum_lo = 0.0;
        }
        sum_hi = sum_hi + gj * w;
        sum_lo = sum_lo + gj * (1.0 - w);
        /* d p through w only, 0 where the clip cut p; d gate_t = sum_{j <= t} d p_j */
        const double dp = p <= top ? gj * (z[ihi] - z[ilo]) : 0.0;
        dgate = j == 0 ? dp : dgate + dp;
        /* sigmoid'(a) = sigmoid(a) sigmoid(-a) */
        pe_store(o, j, odt, (dgate * sig[j]) * sneg[j]);
    }
    if (j < k_len) {
        /* the keys after the query: position 0 (w = 0, a floor and ceil of 0)
         * and no gradient of their logits */
        if (at_hi != 0 || j == 0) {
            zh[at_hi] = sum_hi;
            at_hi = 0;
            sum_hi = 0.0;
        }
        if (at_lo != 0 || j == 0) {
            zl[at_lo] = sum_lo;
            at_lo = 0;
            sum_lo = 0.0;
        }
        const double w = 0.0;
        for (; j < k_len; ++j) {
            const double gj = pe_load(g, j, gdt);
            sum_hi = sum_hi + gj * w;
            sum_lo = sum_lo + gj * (1.0 - w);
            pe_store(o, j, odt, 0.0);
        }
    }
    zh[at_hi] = sum_hi;
    zl[at_lo] = sum_lo;
}

/* Row r of a backward call (the body of each path's pe_cope_grad_row_fn):
 * scratch PE_COPE_GRAD_SCRATCH(k_len, npos, d) doubles (the row's gates,
 * their mirrors and positions, its products z up to its largest position
 * index, the sums of the gradient of z at each key's ceil and floor, and
 * the row's gradient of its query), sigfn and zfn the path's gates (as
 * pe_cope_sig_run) and products (the row's query in c->q64).  Each step
 * is grad_numpy's, op for op: a key after the query has position 0 (its
 * gates and the later ones are 0) and a gradient of 0.  The row's gradient
 * of z up to its largest position index, and that index, go to c->dz and
 * c->pmax; its gradient of the query, to c->d_query. */
PE_INLINE void pe_cope_grad_row(const struct pe_cope_grad *c, ptrdiff_t r, double *scratch,
                                pe_cope_sig_fn sigfn, pe_cope_z_fn zfn)
{
    const ptrdiff_t k_len = c->k_len, npos = (ptrdiff_t)c->npos, i = r % c->q_len;
    const char *l = c->logits + r * c->lstride, *g = c->grad + r * c->gstride;
    char *o = c->d_logits + r * c->dstride;
    double *dz = c->dz + r * npos;
    double *sig = scratch, *sneg = sig + k_len, *pos = sneg + k_len, *z = pos + k_len;
    double *zh = z + npos, *zl = zh + npos, *acc = zl + npos;
    const double top = (double)(npos - 1);
    int64_t last = (int64_t)k_len - 1;
    if (c->causal && c->q_offset + (int64_t)i < last)
        last = c->q_offset + (int64_t)i < -1 ? -1 : c->q_offset + (int64_t)i;
    /* the gates of the keys seen, and the positions summed from the row's end back */
    sigfn(l, c->logits_dtype, (ptrdiff_t)(last + 1), sig, sneg);
    double s = 0.0;
    for (ptrdiff_t j = (ptrdiff_t)last; j >= 0; --j) {
        s = s + sig[j];
        pos[j] = s;
    }
    /* the largest ceil index of the row: its first key's (0 if it sees none) */
    const ptrdiff_t pmax = last >= 0 ? (ptrdiff_t)ceil(pos[0] < top ? pos[0] : top) : 0;
    /* z up to there (the only ones the keys read) */
    zfn(c->q64 + r * c->d, c->et, c->d, npos, pmax + 1, z, 0, 1);
    for (ptrdiff_t p = 0; p <= pmax; ++p)
        zh[p] = zl[p] = 0.0;
    const int gdt = c->grad_dtype, odt = c->d_dtype;
    if (gdt == PE_F32 && odt == PE_F32)
        pe_cope_grad_keys(g, o, z, sig, sneg, pos, zh, zl, k_len, last, top, PE_F32, PE_F32);
    else if (gdt == PE_F64 && odt == PE_F64)
        pe_cope_grad_keys(g, o, z, sig, sneg, pos, zh, zl, k_len, last, top, PE_F64, PE_F64);
    else
        pe_cope_grad_keys(g, o, z, sig, sneg, pos, zh, zl, k_len, last, top, gdt, odt);
    for (ptrdiff_t p = 0; p <= pmax; ++p)
        dz[p] = zh[p] + zl[p];
    c->pmax[r] = pmax;
    /* d q = dz . e: from 0, in the order of the positions (four at a time:
     * each element's additions in that order) */
    const ptrdiff_t d = c->d;
    for (ptrdiff_t e = 0; e < d; ++e)
        acc[e] = 0.0;
    ptrdiff_t p = 0;
    for (; p + 3 <= pmax; p += 4) {
        const double w0 = dz[p], w1 = dz[p + 1], w2 = dz[p + 2], w3 = dz[p + 3];
        const double *t0 = c->table + p * d, *t1 = t0 + d, *t2 = t1 + d, *t3 = t2 + d;
        for (ptrdiff_t e = 0; e < d; ++e)
            acc[e] = (((acc[e] + w0 * t0[e]) + w1 * t1[e]) + w2 * t2[e]) + w3 * t3[e];
    }
    for (; p <= pmax; ++p) {
        const double w = dz[p], *row = c->table + p * d;
        for (ptrdiff_t e = 0; e < d; ++e)
            acc[e] = acc[e] + w * row[e];
    }
    char *dq = c->d_query + r * c->dq_stride;
    for (ptrdiff_t e = 0; e < d; ++e)
        pe_store(dq, e, c->dq_dtype, acc[e]);
}

/* Positions [p0, p1) of the gradient of the table (the body of each path's
 * pe_cope_grad_table_fn): d_table[p] = sum over the rows r whose largest
 * position index is >= p, from 0 in the order of the rows, of dz[r, p] *
 * q[r].  The rows four at a time: the positions all four reach take the
 * four products in one statement (each element's additions in the order
 * of the rows), the rest each row's in turn. */
PE_INLINE void pe_cope_grad_table(const struct pe_cope_grad *c, ptrdiff_t p0, ptrdiff_t p1)
{
    const ptrdiff_t d = c->d, npos = (ptrdiff_t)c->npos, rows = c->rows;
    const int64_t *pmax = c->pmax;
    for (ptrdiff_t p = p0; p < p1; ++p)
        for (ptrdiff_t e = 0; e < d; ++e)
            c->d_table[p * d + e] = 0.0;
    for (ptrdiff_t r0 = 0; r0 < rows; r0 += 4) {
        const ptrdiff_t n = rows - r0 < 4 ? rows - r0 : 4;
        int64_t all = pmax[r0];
        for (ptrdiff_t t = 1; t < n; ++t)
            all = pmax[r0 + t] < all ? pmax[r0 + t] : all;
        ptrdiff_t p = p0;
        if (n == 4) {
            const double *dz0 = c->dz + r0 * npos, *dz1 = dz0 + npos, *dz2 = dz1 + npos;
            const double *dz3 = dz2 + npos, *q0 = c->q64 + r0 * d, *q1 = q0 + d, *q2 = q1 + d;
            const double *q3 = q2 + d;
            for (; p < p1 && p <= all; ++p) {
                const double w0 = dz0[p], w1 = dz1[p], w2 = dz2[p], w3 = dz3[p];
                double *out = c->d_table + p * d;
                for (ptrdiff_t e = 0; e < d; ++e)
                    out[e] = (((out[e] + w0 * q0[e]) + w1 * q1[e]) + w2 * q2[e]) + w3 * q3[e];
            }
        }
        for (; p < p1; ++p) {
            double *out = c->d_table + p * d;
            for (ptrdiff_t t = 0; t < n; ++t) {
                if (pmax[r0 + t] < p)
                    continue;
                const double w = c->dz[(r0 + t) * npos + p], *q = c->q64 + (r0 + t) * d;
                for (ptrdiff_t e = 0; e < d; ++e)
                    out[e] = out[e] + w * q[e];
            }
        }
    }
}

/* The table `table` of a path's kernels, [add][enum pe_dtype of dst]: rows
 * [r0, r1) by pe_cope_row with the path's run and keys, z the rows'. */
#define PE_COPE_ROWS_TABLE(table, run, keys)                                                       \
    PE_INLINE void table##_body(const struct pe_cope *c, ptrdiff_t r0, ptrdiff_t r1,               \
                                const double *z, const int add, const int dtype)                   \
    {                                                                                              \
        for (ptrdiff_t r = r0; r < r1; ++r) {                                                      \
            pe_cope_prefetch(c, r + 1);                                                            \
            pe_cope_row(c, r, z + (r - r0) * c->npos, run, keys, add, dtype);                      \
        }                                                                                          \
    }                                                                                              \
    PE_SPECIALISE(const pe_cope_rows_fn, table, table##_body,                                      \
                  (const struct pe_cope *c, ptrdiff_t r0, ptrdiff_t r1, const double *z),          \
                  (c, r0, r1, z))

#endif
