/*
 * bias_neon.c -- the bias kernels of bias.c on the NEON path where they
 * are row adds: the rows of a bias added into scores (pe_row_add_vec);
 * written rows are copies, as on the portable path.  The same bits as
 * bias.c.
 */
#include <string.h>

#include "bias.h"
#include "pe.h"
#include "simd.h"

#include "neon.h"

#if PE_ARM
PE_INLINE void rows_neon(const struct pe_toeplitz *t, ptrdiff_t r0, ptrdiff_t r1, const int op,
                         const int dtype)
{
    const size_t isz = pe_itemsize(dtype);
    ptrdiff_t k = t->d->k_len;
    for (ptrdiff_t r = r0; r < r1; ++r) {
        const char *src;
        char *row = pe_toeplitz_row(t, r, isz, &src);
        if (op == PE_BIAS_ADD)
            pe_row_add_vec(row, src, k, PE_ROW_SAME, dtype);
        else
            memcpy(row, src, (size_t)k * isz);
    }
}

PE_SPECIALISE(const pe_bias_rows_fn, pe_bias_rows_neon, rows_neon,
              (const struct pe_toeplitz *t, ptrdiff_t r0, ptrdiff_t r1), (t, r0, r1));
#endif
