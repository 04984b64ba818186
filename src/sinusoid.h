/*
 * sinusoid.h -- what sinusoid.c and sinusoid_avx2.c share: the store of one
 * column of a row.
 */
#ifndef PE_SINUSOID_H
#define PE_SINUSOID_H

#include "pe.h"
#include "simd.h"

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

#endif
