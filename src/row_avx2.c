/*
 * row_avx2.c -- the AVX2 tables of the row primitives (row.c): the bodies
 * of avx2.h, pe_row_add_simd (and pe_cast_row_simd), the same bits as the
 * portable ones.
 */
#include "pe.h"
#include "simd.h"

#include "avx2.h"

#if PE_X86
PE_SPECIALISE_4(const pe_row_add_fn, pe_row_add_avx2, pe_row_add_simd,
                (char *o, const char *x, ptrdiff_t n), (o, x, n));

PE_AVX2_END
#endif
