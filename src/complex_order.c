/*
 * complex_order.c -- complex-order word embeddings (complex_order.h): the
 * portable rows and the entry point.  Tokens are shared among the library's
 * threads; each token's parts are one thread's, so the bits do not depend on
 * the thread count.
 */
#include "complex_order.h"

#include "pe.h"
#include "simd.h"

/* The portable rows: every element by pe_co_tail. */
PE_INLINE void co_head_scalar(const struct pe_complex_order *c, ptrdiff_t t, ptrdiff_t *i0,
                              unsigned *bad, const int interleaved, const int dtype)
{
    (void)c, (void)t, (void)i0, (void)bad, (void)interleaved, (void)dtype;
}

PE_CO_ROWS_TABLE(pe_complex_order_rows_scalar, co_head_scalar);

/* Tokens of a task. */
#define CO_ROWS 8

int pe_complex_order(const struct pe_kernels *k, const struct pe_complex_order *c, int nthreads,
                     unsigned *bad)
{
    const ptrdiff_t n = c->n;
    const ptrdiff_t tasks = (n + CO_ROWS - 1) / CO_ROWS;
    const pe_complex_order_rows_fn fn = k->complex_order_rows[c->interleaved != 0][c->dtype];
    unsigned found = 0;
    /* every row is read, so that every table holding a value that is not
     * finite is known (the output is not used then) */
#pragma omp parallel for schedule(static) num_threads(pe_team(nthreads, 2 * n * c->dim))           \
    reduction(| : found)
    for (ptrdiff_t task = 0; task < tasks; ++task) {
        const ptrdiff_t t0 = task * CO_ROWS;
        unsigned mine = 0;
        fn(c, t0, n - t0 < CO_ROWS ? n : t0 + CO_ROWS, &mine);
        found |= mine;
    }
    *bad = found;
    return found ? -2 : 0;
}
