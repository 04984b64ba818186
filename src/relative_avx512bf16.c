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
/* Row task of the (batch * heads * q_len) rows, bfloat16 scores: as
 * relative_avx2.c's row_avx2 walks them. */
static void row_bf16(const struct pe_rel_gather *g, ptrdiff_t task)
{
    const struct pe_bias_dst *d = g->dst;
    const struct pe_rel_src *s = g->src;
    ptrdiff_t q = d->q_len, k = d->k_len, p = task / q, i = task % q;
    ptrdiff_t b = p / d->heads, h = p % d->heads;
    if (g->prefetch)
        pe_rel_prefetch_row(g, task + 2);
    if (g->map32 == NULL) {
        pe_rel_row_scalar(g, s, b, h, i, 0, k);
        return;
    }
    char *row = d->data + b * d->stride_b + h * d->stride_h + i * d->stride_q;
    const char *prod =
        s->data + (s->batch == 1 ? 0 : b) * s->stride_b + h * s->stride_h + i * s->stride_r;
    ptrdiff_t t0 = q - 1 - i; /* t of key 0 */
    for (ptrdiff_t r = pe_rel_run_at(g->segs, g->nsegs, t0); r < g->nsegs; ++r) {
        const struct pe_rel_run *seg = &g->segs[r];
        ptrdiff_t a = seg->start > t0 ? seg->start : t0;
        ptrdiff_t e = seg[1].start < t0 + k ? seg[1].start : t0 + k;
        if (a >= t0 + k)
            break;
        if (seg->base < 0)
            continue;
        ptrdiff_t col = seg->slope == 2 ? 0 : (ptrdiff_t)seg->base + seg->slope * (a - seg->start);
        char *o = row + (a - t0) * 2;
        if (seg->slope == 1)
            pe_row_add_simd512(o, prod + col * 4, e - a, PE_ROW_PRODUCT, PE_BF16);
        else
            pe_rel_segment_avx2_bf16(o, prod, col, seg->slope, g->map32 + a, g->wmin + a,
                                     g->perm + 8 * a, e - a);
    }
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
