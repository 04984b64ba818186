/*
 * relative_avx512bf16.c -- the gather of relative.c into bfloat16 scores by
 * query on the AVX-512 path of CPUs with AVX-512 BF16: a run of slope 1
 * (Transformer-XL's shift, TENER's query term) is a row of products added
 * into a row of scores, sixteen at a time by pe_row_add_simd512, whose
 * roundings to bfloat16 are VCVTNEPS2BF16 (the integer way for a vector
 * holding a subnormal): each product rounded to bfloat16, then the sum,
 * the bits of the AVX2 path.  The other segments of a row, and every
 * other gather, are the AVX2 path's.
 */
#define PE_AVX512_BF16 1

#include "pe.h"
#include "relative.h"
#include "simd.h"

#include "avx512.h"

#if PE_X86
/* A run of slope 1: a row of products added into a row of scores. */
static void add_run(char *o, const char *x, ptrdiff_t n)
{
    pe_row_add_simd512(o, x, n, PE_ROW_PRODUCT, PE_BF16);
}

/* Row task of the (batch * heads * q_len) rows, bfloat16 scores: the AVX2
 * path's walk of its segments, its runs of slope 1 by add_run. */
static void row_bf16(const struct pe_rel_gather *g, ptrdiff_t task)
{
    pe_rel_row_bf16_avx2(g, task, add_run);
}

/* The AVX2 path's task, but by query into bfloat16 scores. */
#define PE_REL_TASK(by_key, dtype)                                                                 \
    static void task_##by_key##_##dtype(const struct pe_rel_gather *g, ptrdiff_t task)             \
    {                                                                                              \
        pe_rel_task_avx2[by_key][dtype](g, task);                                                  \
    }
PE_REL_TASK(0, PE_F16)
PE_REL_TASK(0, PE_F32)
PE_REL_TASK(0, PE_F64)
PE_REL_TASK(1, PE_F16)
PE_REL_TASK(1, PE_F32)
PE_REL_TASK(1, PE_F64)
PE_REL_TASK(1, PE_BF16)

const pe_rel_task_fn pe_rel_task_avx512_bf16[2][PE_NDTYPES] = {
    {task_0_PE_F16, task_0_PE_F32, task_0_PE_F64, row_bf16},
    {task_1_PE_F16, task_1_PE_F32, task_1_PE_F64, task_1_PE_BF16},
};

PE_AVX512_END
#endif
