/*
 * sinusoid.h -- what sinusoid.c and sinusoid_avx2.c share: the store of one
 * column of a row.
 */
#ifndef PE_SINUSOID_H
#define PE_SINUSOID_H

#include "pe.h"
#include "simd.h"
#include "sincos.h"

/* Element index of sin and cos of column j in a row. */
PE_INLINE ptrdiff_t pe_sin_index(ptrdiff_t j, const int layout)
{
    return layout == PE_INTERLEAVED ? 2 * j : j;
}

PE_INLINE ptrdiff_t pe_cos_index(ptrdiff_t j, ptrdiff_t half, const int layout)
{
    return layout == PE_INTERLEAVED ? 2 * j + 1 : half + j;
}

/* Column j of a row: s and c rounded once to dtype. */
PE_INLINE void pe_sinusoid_store1(char *row, ptrdiff_t j, ptrdiff_t half, const int layout,
                                  const int dtype, double s, double c)
{
    pe_store(row, pe_sin_index(j, layout), dtype, s);
    pe_store(row, pe_cos_index(j, half, layout), dtype, c);
}

/* Columns [j, half) of a row by rotation: s[j], c[j] rotated by the step
 * sd[j], cd[j] (pe_rotate1) and stored (pe_sinusoid_store1). */
PE_INLINE void pe_sinusoid_rotate_tail(char *row, ptrdiff_t j, ptrdiff_t half, double *s, double *c,
                                       const double *sd, const double *cd, const double *freq,
                                       double m, double p, const int layout, const int dtype)
{
    for (; j < half; ++j) {
        pe_rotate1(&s[j], &c[j], sd[j], cd[j], freq[j], m, p);
        pe_sinusoid_store1(row, j, half, layout, dtype, s[j], c[j]);
    }
}

/* The parameters and arguments of a cell kernel (pe_sinusoid_cell_fn), as
 * PE_SPECIALISE takes them. */
#define PE_SINUSOID_CELL_PARAMS                                                                    \
    (struct pe_rotor * rt, const double *pos, ptrdiff_t r0, ptrdiff_t n, const double *freq,       \
     ptrdiff_t half, double wmax, char *out, ptrdiff_t row_stride)
#define PE_SINUSOID_CELL_ARGS (rt, pos, r0, n, freq, half, wmax, out, row_stride)

#endif
