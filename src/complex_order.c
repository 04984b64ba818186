/*
 * complex_order.c -- complex-order word embeddings (complex_order.h): one
 * token's row at a time, its phases formed and its amplitudes read into a
 * thread's buffer, their sine and cosine by the path's sincos_row (at
 * position 1, so of the phases themselves), then both parts rounded once
 * and stored.  Tokens are shared among the library's threads; each row is
 * one thread's, so the bits do not depend on the thread count.
 */
#include "complex_order.h"

#include <math.h>
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "pe.h"
#include "simd.h"

/* Tokens [t0, t1) of c; buf holds 4 * dim doubles.  The flags of the
 * tables holding a value that is not finite are or-ed into *bad (every
 * row is read, so that all of them are known; such a row is not written). */
PE_INLINE void co_rows(const struct pe_complex_order *c, pe_sincos_row_fn sincos, ptrdiff_t t0,
                       ptrdiff_t t1, double *buf, unsigned *bad, const int interleaved,
                       const int dtype)
{
    const ptrdiff_t dim = c->dim;
    double *phi = buf, *amp = buf + dim, *s = buf + 2 * dim, *co = buf + 3 * dim;
    const ptrdiff_t item = (ptrdiff_t)pe_itemsize(dtype);
    for (ptrdiff_t t = t0; t < t1; ++t) {
        const ptrdiff_t id = (ptrdiff_t)c->ids[t];
        const double p = c->pos[t];
        const char *ra = c->amp + id * c->amp_stride, *rw = c->freq + id * c->freq_stride,
                   *rp = c->phase + id * c->phase_stride;
        /* x - x is 0 for a finite x, nan otherwise */
        double ca = 0.0, cw = 0.0, cp = 0.0;
        for (ptrdiff_t i = 0; i < dim; ++i) {
            const double a = pe_load(ra, i, dtype), w = pe_load(rw, i, dtype),
                         th = pe_load(rp, i, dtype);
            ca += a - a;
            cw += w - w;
            cp += th - th;
            amp[i] = a;
            phi[i] = p * w + th;
        }
        if (!(ca == 0.0 && cw == 0.0 && cp == 0.0)) {
            *bad |= (ca == 0.0 ? 0u : PE_CO_BAD_AMP) | (cw == 0.0 ? 0u : PE_CO_BAD_FREQ) |
                    (cp == 0.0 ? 0u : PE_CO_BAD_PHASE);
            continue;
        }
        /* 1 * phi[i] is phi[i]: the sine and cosine of the phases */
        sincos(1.0, phi, dim, s, co);
        if (interleaved) {
            char *o = c->re + t * 2 * dim * item;
            for (ptrdiff_t i = 0; i < dim; ++i) {
                pe_store(o, 2 * i, dtype, amp[i] * co[i]);
                pe_store(o, 2 * i + 1, dtype, amp[i] * s[i]);
            }
        } else {
            char *ore = c->re + t * dim * item, *oim = c->im + t * dim * item;
            for (ptrdiff_t i = 0; i < dim; ++i)
                pe_store(ore, i, dtype, amp[i] * co[i]);
            for (ptrdiff_t i = 0; i < dim; ++i)
                pe_store(oim, i, dtype, amp[i] * s[i]);
        }
    }
}

typedef void (*co_rows_fn)(const struct pe_complex_order *c, pe_sincos_row_fn sincos, ptrdiff_t t0,
                           ptrdiff_t t1, double *buf, unsigned *bad);
PE_SPECIALISE(static const co_rows_fn, co_rows_of, co_rows,
              (const struct pe_complex_order *c, pe_sincos_row_fn sincos, ptrdiff_t t0,
               ptrdiff_t t1, double *buf, unsigned *bad),
              (c, sincos, t0, t1, buf, bad));

/* Tokens of a task. */
#define CO_ROWS 8

int pe_complex_order(const struct pe_kernels *k, const struct pe_complex_order *c, int nthreads,
                     unsigned *bad)
{
    *bad = 0;
    const ptrdiff_t n = c->n, dim = c->dim;
    if (n == 0 || dim == 0)
        return 0;
    const ptrdiff_t tasks = (n + CO_ROWS - 1) / CO_ROWS;
    const int team = tasks > 1 ? pe_team(nthreads, 2 * n * dim) : 1;
    double *scratch = malloc((size_t)(4 * dim * team) * sizeof *scratch);
    if (scratch == NULL)
        return -1;
    const co_rows_fn fn = co_rows_of[c->interleaved != 0][c->dtype];
    const pe_sincos_row_fn sincos = k->sincos_row;
    unsigned found = 0;
#pragma omp parallel num_threads(team) if (team > 1) reduction(| : found)
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        double *buf = scratch + 4 * dim * tid;
        unsigned mine = 0;
#pragma omp for schedule(static)
        for (ptrdiff_t task = 0; task < tasks; ++task) {
            const ptrdiff_t t0 = task * CO_ROWS;
            fn(c, sincos, t0, n - t0 < CO_ROWS ? n : t0 + CO_ROWS, buf, &mine);
        }
        found |= mine;
    }
    free(scratch);
    *bad = found;
    return found ? -2 : 0;
}
