/*
 * row_neon.c -- the NEON tables of the row primitives (row.c): the body of
 * neon.h, pe_row_add_vec, the same bits as the portable one.
 */
#include "pe.h"
#include "simd.h"

#include "neon.h"

#if PE_ARM
PE_SPECIALISE_4(const pe_row_add_fn, pe_row_add_neon, pe_row_add_vec,
                (char *o, const char *x, ptrdiff_t n), (o, x, n));
#endif
