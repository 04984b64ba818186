/*
 * row_avx512bf16.c -- the row primitives (row.c) on the AVX-512 path of
 * CPUs with AVX-512 BF16: the body of avx512.h, pe_row_add_simd512, whose
 * rounding to bfloat16 is VCVTNEPS2BF16 (the vectors holding a subnormal
 * the integer way), the same bits as the portable one.  Without BF16 the
 * AVX-512 path's rows are the AVX2 ones (simd.c): sixteen at a time with
 * the integer rounding gained nothing over them.
 */
#define PE_AVX512_BF16 1

#include "pe.h"
#include "simd.h"

#include "avx512.h"

#if PE_X86
PE_SPECIALISE_4(const pe_row_add_fn, PE_AVX512_NAME(pe_row_add), pe_row_add_simd512,
                (char *o, const char *x, ptrdiff_t n), (o, x, n));

PE_AVX512_END
#endif
