/*
 * rope_run.c -- the portable rope_run kernels (pe_rope_run_scalar, the
 * portable half of the kernel table's rope_run; rope_avx2.c has the AVX2
 * half): a run of rows of apply_rope rotated by the tile of cos/sin that
 * rope_table.c made for it, each pair of a
 * row rotated by its cos/sin with one multiply and one FMA per output in
 * the compute precision (float32 for float16, bfloat16 and float32 data,
 * float64 for float64), in the order the AVX2 kernels (rope_avx2.c) use, so both give
 * the same bits.
 */
#include "pe.h"
#include "rope.h"
#include "simd.h"

PE_INLINE void run_scalar(const struct pe_rope_run *r, const int layout, const int dtype)
{
    pe_rope_run_rows(r, NULL, layout, dtype);
}

PE_SPECIALISE_ROPE(const pe_rope_run_fn, pe_rope_run_scalar, run_scalar,
                   (const struct pe_rope_run *r), (r));
