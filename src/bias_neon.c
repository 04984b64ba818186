/*
 * bias_neon.c -- the bias kernels of bias.c on the NEON path where they
 * are row adds: the rows of a bias added into scores (bias.h's
 * pe_toeplitz_rows with pe_row_add_vec); written rows are copies, as on
 * the portable path.  The same bits as
 * bias.c.
 */
#include "bias.h"
#include "pe.h"
#include "simd.h"

#include "neon.h"

#if PE_ARM
PE_INLINE void rows_neon(const struct pe_toeplitz *t, ptrdiff_t r0, ptrdiff_t r1, const int op,
                         const int dtype)
{
    pe_toeplitz_rows(t, r0, r1, pe_row_add_vec, op, dtype);
}

PE_SPECIALISE(const pe_bias_rows_fn, pe_bias_rows_neon, rows_neon,
              (const struct pe_toeplitz *t, ptrdiff_t r0, ptrdiff_t r1), (t, r0, r1));
#endif
