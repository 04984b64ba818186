/*
 * dot_avx512bf16.c -- the products of bfloat16 vectors (dot.h) on the
 * AVX-512 path of CPUs with AVX-512 BF16: the instruction itself
 * (VDPBF16PS), whose order of additions and handling of subnormals dot.h
 * states and the other paths follow.  A tile is 8 rows by 32 columns, a's
 * pairs of elements broadcast from memory, b laid out per head in panels
 * of 32 columns: for each pair of elements, the 32 columns' pairs.
 */
#define PE_AVX512_BF16 1

#include "dot.h"

#include "avx512.h"

#if PE_X86
#define PANEL 32
#define ROWS 8

/* b of one head into pk: panel q, pair p at pk[(q * d / 2 + p) * 32]: the
 * panel's 32 pairs (zeros past n_len). */
static void pack(const struct pe_bf16_gemm *g, const uint16_t *b, uint32_t *pk)
{
    ptrdiff_t half = g->d / 2, panels = (g->n_len + PANEL - 1) / PANEL;
    for (ptrdiff_t q = 0; q < panels; ++q) {
        uint32_t *o = pk + q * half * PANEL;
        for (ptrdiff_t j = 0; j < PANEL; ++j) {
            ptrdiff_t n = q * PANEL + j;
            if (n >= g->n_len) {
                for (ptrdiff_t p = 0; p < half; ++p)
                    o[p * PANEL + j] = 0;
                continue;
            }
            const uint16_t *y = b + n * g->b_row;
            for (ptrdiff_t p = 0; p < half; ++p) {
                uint32_t w; /* the pair's two elements, the first in the low half */
                memcpy(&w, y + 2 * p, sizeof w);
                o[p * PANEL + j] = w;
            }
        }
    }
}

/* The mask of the first `cols` of sixteen lanes (none where cols < 1). */
PE_INLINE __mmask16 first_lanes(ptrdiff_t cols)
{
    return cols >= 16 ? (__mmask16)0xFFFF : cols < 1 ? 0 : (__mmask16)((1u << cols) - 1u);
}

/* Sixteen products stored at c, the first `cols` of them (1 to 16). */
PE_INLINE void store16(float *c, __m512 v, ptrdiff_t cols)
{
    __m512 nan = _mm512_castsi512_ps(_mm512_set1_epi32((int)PE_DOT_NAN));
    v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), nan);
    _mm512_mask_storeu_ps(c, first_lanes(cols), v);
}

PE_INLINE __m512bh as_bh(__m512i v)
{
    __m512bh h;
    memcpy(&h, &v, sizeof h);
    return h;
}

/* R rows of a (a_row apart) against one panel, cols (1 to 32) of its
 * products stored at c, rows c_row apart, their sums starting at init's
 * (NULL: at +0; a subnormal start as zero, the instruction's DAZ). */
PE_INLINE void tile(const uint16_t *a, ptrdiff_t a_row, ptrdiff_t d, const uint32_t *pk,
                    const float *init, float *c, ptrdiff_t c_row, ptrdiff_t cols, const int R)
{
    __m512 acc[ROWS][2];
    __m512 start0 = _mm512_setzero_ps(), start1 = start0;
    if (init != NULL) {
        start0 = _mm512_maskz_loadu_ps(first_lanes(cols), init);
        start1 = _mm512_maskz_loadu_ps(first_lanes(cols - 16), init + 16);
    }
    for (int r = 0; r < R; ++r) {
        acc[r][0] = start0;
        acc[r][1] = start1;
    }
    for (ptrdiff_t p = 0; p < d / 2; ++p) {
        __m512bh b0 = as_bh(_mm512_load_si512(pk + p * PANEL));
        __m512bh b1 = as_bh(_mm512_load_si512(pk + p * PANEL + 16));
        for (int r = 0; r < R; ++r) {
            uint32_t w;
            memcpy(&w, a + r * a_row + 2 * p, sizeof w);
            __m512bh x = as_bh(_mm512_set1_epi32((int)w));
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], x, b0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], x, b1);
        }
    }
    for (int r = 0; r < R; ++r) {
        store16(c + r * c_row, acc[r][0], cols);
        if (cols > 16)
            store16(c + r * c_row + 16, acc[r][1], cols - 16);
    }
}

void pe_bf16_rows_avx512_bf16(const struct pe_bf16_gemm *g, ptrdiff_t h, ptrdiff_t m0, ptrdiff_t m1,
                              void *pack_at, int pack_now)
{
    ptrdiff_t d = g->d, n_len = g->n_len;
    uint32_t *pk = pack_at;
    if (pack_now)
        pack(g, g->b + h * g->b_head, pk);
    const uint16_t *a = g->a + h * g->a_head;
    const float *init = g->init != NULL ? g->init + h * g->init_head : NULL;
    for (ptrdiff_t m = m0; m < m1; m += ROWS) {
        int R = m1 - m < ROWS ? (int)(m1 - m) : ROWS;
        const uint16_t *ar = a + m * g->a_row;
        float *c = g->c + h * g->c_head + m * g->c_row;
        ptrdiff_t lo, hi;
        pe_bf16_columns(g, m, PANEL, &lo, &hi);
        pe_bf16_zero_outside(c, g->c_row, R, lo, hi, n_len);
        for (ptrdiff_t q = lo / PANEL; q < (hi + PANEL - 1) / PANEL; ++q) {
            const uint32_t *panel = pk + q * (d / 2) * PANEL;
            ptrdiff_t cols = n_len - q * PANEL < PANEL ? n_len - q * PANEL : PANEL;
            float *cq = c + q * PANEL;
            const float *iq = init != NULL ? init + q * PANEL : NULL;
            if (R == ROWS) { /* a whole tile; the last rows of a task one at a time */
                tile(ar, g->a_row, d, panel, iq, cq, g->c_row, cols, ROWS);
                continue;
            }
            for (int r = 0; r < R; ++r)
                tile(ar + r * g->a_row, g->a_row, d, panel, iq, cq + r * g->c_row, g->c_row, cols,
                     1);
        }
    }
}

PE_AVX512_END
#endif
