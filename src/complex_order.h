/*
 * complex_order.h -- complex-order word embeddings (Wang et al. 2020):
 * r[t] cos(phi) and r[t] sin(phi), phi = pos * w[t] + theta[t], each token's
 * rows of the three tables read where they are, the phase formed in float64
 * (the product, then the sum: two roundings, as NumPy forms it) and each part
 * rounded once to the result type.  The sine and cosine are pe_sincos1's
 * (sincos.h: within ~1.5 ulp of those of the float64 phase), four at a time
 * on the AVX2 path (pe_sincos4, the same bits), so the parts have the same
 * bits on every path.  Nothing float64 of the output's size is written: the
 * kernels' complex_order_rows go from the tables' rows to the parts element
 * by element.  complex_order.c has the portable rows and the entry point,
 * complex_order_avx2.c the AVX2 rows; the NEON path takes the portable ones.
 */
#ifndef PE_COMPLEX_ORDER_H
#define PE_COMPLEX_ORDER_H

#include <stddef.h>
#include <stdint.h>

#include "pe.h"
#include "simd.h"
#include "sincos.h"

/* One call: n tokens, ids[t] in [0, vocab) (the caller checks), pos[t]
 * finite; the three tables (vocab, dim) of the result's element type
 * dtype, each row contiguous, `*_stride` bytes apart; the parts written
 * as rows of dim at re + t * dim and im + t * dim (split), or with
 * interleaved set as dim (real, imag) pairs at re + t * 2 dim (a complex
 * array's bytes; im unused). */
struct pe_complex_order {
    const int64_t *ids;
    const double *pos;
    ptrdiff_t n, dim;
    const char *amp, *freq, *phase;
    ptrdiff_t amp_stride, freq_stride, phase_stride;
    char *re, *im;
    int interleaved, dtype;
};

/* Bits of what pe_complex_order found not finite in the rows it read. */
enum { PE_CO_BAD_AMP = 1, PE_CO_BAD_FREQ = 2, PE_CO_BAD_PHASE = 4 };

/* x - x: 0 for a finite x, nan otherwise; its bits or-ed into an
 * accumulator say whether any x was not finite (on every path alike). */
PE_INLINE uint64_t pe_co_nonfinite(double x)
{
    union {
        double d;
        uint64_t u;
    } v = {x - x};
    return v.u;
}

/* Elements [i0, dim) of token t's parts; the flags of the tables holding a
 * value that is not finite there or-ed into *bad.  The portable rows, and
 * the AVX2 rows' tails. */
PE_INLINE void pe_co_tail(const struct pe_complex_order *c, ptrdiff_t t, ptrdiff_t i0,
                          unsigned *bad, const int interleaved, const int dtype)
{
    const ptrdiff_t id = (ptrdiff_t)c->ids[t], dim = c->dim;
    const ptrdiff_t item = (ptrdiff_t)pe_itemsize(dtype);
    const double p = c->pos[t];
    const char *ra = c->amp + id * c->amp_stride, *rw = c->freq + id * c->freq_stride,
               *rp = c->phase + id * c->phase_stride;
    char *ore = c->re + t * (interleaved ? 2 : 1) * dim * item, *oim = c->im + t * dim * item;
    uint64_t ba = 0, bw = 0, bp = 0;
    for (ptrdiff_t i = i0; i < dim; ++i) {
        const double a = pe_load(ra, i, dtype), w = pe_load(rw, i, dtype),
                     th = pe_load(rp, i, dtype);
        ba |= pe_co_nonfinite(a);
        bw |= pe_co_nonfinite(w);
        bp |= pe_co_nonfinite(th);
        double s, co;
        pe_sincos1(p * w + th, &s, &co);
        if (interleaved) {
            pe_store(ore, 2 * i, dtype, a * co);
            pe_store(ore, 2 * i + 1, dtype, a * s);
        } else {
            pe_store(ore, i, dtype, a * co);
            pe_store(oim, i, dtype, a * s);
        }
    }
    *bad |= (ba ? PE_CO_BAD_AMP : 0u) | (bw ? PE_CO_BAD_FREQ : 0u) | (bp ? PE_CO_BAD_PHASE : 0u);
}

/* The table of row kernels of a path, [interleaved][dtype], from its
 * function of (c, t, &i0, bad, interleaved, dtype) doing the elements
 * [0, i0) of token t's parts (and setting i0); pe_co_tail does the rest. */
#define PE_CO_ROWS_TABLE(table, head)                                                              \
    PE_INLINE void table##_body(const struct pe_complex_order *c, ptrdiff_t t0, ptrdiff_t t1,      \
                                unsigned *bad, const int interleaved, const int dtype)             \
    {                                                                                              \
        for (ptrdiff_t t = t0; t < t1; ++t) {                                                      \
            ptrdiff_t i0 = 0;                                                                      \
            head(c, t, &i0, bad, interleaved, dtype);                                              \
            pe_co_tail(c, t, i0, bad, interleaved, dtype);                                         \
        }                                                                                          \
    }                                                                                              \
    PE_SPECIALISE(const pe_complex_order_rows_fn, table, table##_body,                             \
                  (const struct pe_complex_order *c, ptrdiff_t t0, ptrdiff_t t1, unsigned *bad),   \
                  (c, t0, t1, bad))

/* The embeddings of c on the path of k.  Returns 0, or -2 if a value of a
 * row it read is nan or inf: *bad then holds which tables (PE_CO_BAD_*),
 * and the output (written) is not to be used. */
int pe_complex_order(const struct pe_kernels *k, const struct pe_complex_order *c, int nthreads,
                     unsigned *bad);

#endif
