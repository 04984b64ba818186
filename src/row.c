/*
 * row.c -- the portable tables of the row primitives of simd.h: a row of
 * values added into a row of scores (pe_row_add, every bias and relative
 * kernel's add) or a row of float32 (float64) values rounded once to an
 * element type (PE_ROW_CAST); and pe_cast, that rounding over an array.
 * row_avx2.c has the AVX2 tables.
 */
#include "pe.h"
#include "simd.h"

PE_SPECIALISE_4(const pe_row_add_fn, pe_row_add_scalar, pe_row_add,
                (char *o, const char *x, ptrdiff_t n), (o, x, n));

/* Elements of a block of pe_cast, one thread's at a time. */
#define CAST_BLOCK 16384

void pe_cast(const struct pe_kernels *k, const char *x, char *out, ptrdiff_t n, int dtype,
             int nthreads)
{
    pe_row_add_fn fn = k->row_add[PE_ROW_CAST][dtype];
    const ptrdiff_t isz = (ptrdiff_t)pe_itemsize(dtype), xsz = dtype == PE_F64 ? 8 : 4;
    ptrdiff_t nblk = (n + CAST_BLOCK - 1) / CAST_BLOCK;
#pragma omp parallel for schedule(static) num_threads(pe_team(nthreads, n))
    for (ptrdiff_t b = 0; b < nblk; ++b) {
        ptrdiff_t j = b * CAST_BLOCK, m = n - j < CAST_BLOCK ? n - j : CAST_BLOCK;
        fn(out + j * isz, x + j * xsz, m);
    }
}
