/*
 * complex_order.h -- complex-order word embeddings (Wang et al. 2020):
 * r[t] cos(phi) and r[t] sin(phi), phi = pos * w[t] + theta[t], each token's
 * rows of the three tables read where they are, the phase formed in float64
 * (the product, then the sum: two roundings, as NumPy forms it) and each part
 * rounded once to the result type.  The sine and cosine are the kernels'
 * sincos_row (sincos.h: within ~1.5 ulp of those of the float64 phase, the
 * same bits on every SIMD path), so the parts have the same bits on every
 * path.  Nothing float64 of the output's size is written: each thread works
 * one token's row at a time in a buffer of 4 * dim doubles.
 */
#ifndef PE_COMPLEX_ORDER_H
#define PE_COMPLEX_ORDER_H

#include <stddef.h>
#include <stdint.h>

#include "simd.h"

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

/* The embeddings of c on the path of k.  Returns 0, -1 if the buffers
 * cannot be allocated, or -2 if a value of a row it read is nan or inf;
 * *bad then holds which tables (PE_CO_BAD_*), and the output is not to be
 * used (it is written up to there). */
int pe_complex_order(const struct pe_kernels *k, const struct pe_complex_order *c, int nthreads,
                     unsigned *bad);

#endif
