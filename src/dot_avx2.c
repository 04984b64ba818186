/*
 * dot_avx2.c -- the products of bfloat16 vectors (dot.h) on the AVX2 path,
 * and the AVX-512 one without BF16: the bfloat16 values widened to float32
 * (exact), each addition of the instruction one FMA, the pair's second
 * product first, with MXCSR's DAZ and FTZ set for the call (and restored):
 * the instruction's handling of subnormals, the same bits.  A tile is 4
 * rows by 16 columns, b laid out per head in panels of 16 columns: for
 * each pair of columns its second elements, then its first.
 */
#include "dot.h"

#include "avx2.h"

#if PE_X86
#define PANEL 16
#define ROWS 4
#define MXCSR_FTZ_DAZ 0x8040u

static float widen(uint16_t u)
{
    uint32_t w = (uint32_t)u << 16;
    float f;
    memcpy(&f, &w, sizeof f);
    return f;
}

/* b of one head into pk: panel q, pair p at pk[(q * d / 2 + p) * 32]: the
 * panel's sixteen second elements, then its sixteen first (zeros past
 * n_len). */
static void pack(const struct pe_bf16_gemm *g, const uint16_t *b, float *pk)
{
    ptrdiff_t half = g->d / 2, panels = (g->n_len + PANEL - 1) / PANEL;
    for (ptrdiff_t q = 0; q < panels; ++q) {
        float *o = pk + q * half * 2 * PANEL;
        for (ptrdiff_t j = 0; j < PANEL; ++j) {
            ptrdiff_t n = q * PANEL + j;
            const uint16_t *y = b + n * g->b_row;
            for (ptrdiff_t p = 0; p < half; ++p) {
                o[p * 2 * PANEL + j] = n < g->n_len ? widen(y[2 * p + 1]) : 0.0f;
                o[p * 2 * PANEL + PANEL + j] = n < g->n_len ? widen(y[2 * p]) : 0.0f;
            }
        }
    }
}

/* Eight products stored at c, the first `cols` of them (1 to 8). */
PE_INLINE void store8(float *c, __m256 v, ptrdiff_t cols)
{
    __m256 nan = _mm256_castsi256_ps(_mm256_set1_epi32((int)PE_DOT_NAN));
    v = _mm256_blendv_ps(v, nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    if (cols >= 8) {
        _mm256_storeu_ps(c, v);
    } else {
        __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        _mm256_maskstore_ps(c, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)cols), lanes), v);
    }
}

/* Eight floats of p, the first `cols` of them (0 where cols < 1). */
PE_INLINE __m256 load8(const float *p, ptrdiff_t cols)
{
    if (cols >= 8)
        return _mm256_loadu_ps(p);
    __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)cols), lanes));
}

/* R rows of widened a (ar, d apart) against one panel, cols (1 to 16) of
 * its products stored at c, rows c_row apart, their sums starting at
 * init's (NULL: at +0). */
PE_INLINE void tile(const float *ar, ptrdiff_t d, const float *pk, const float *init, float *c,
                    ptrdiff_t c_row, ptrdiff_t cols, const int R)
{
    __m256 acc[ROWS][2];
    __m256 start0 = init != NULL ? load8(init, cols) : _mm256_setzero_ps();
    __m256 start1 = init != NULL ? load8(init + 8, cols - 8) : _mm256_setzero_ps();
    for (int r = 0; r < R; ++r) {
        acc[r][0] = start0;
        acc[r][1] = start1;
    }
    for (ptrdiff_t p = 0; p < d / 2; ++p) {
        const float *bp = pk + p * 2 * PANEL;
        __m256 odd0 = _mm256_load_ps(bp), odd1 = _mm256_load_ps(bp + 8);
        __m256 even0 = _mm256_load_ps(bp + 16), even1 = _mm256_load_ps(bp + 24);
        for (int r = 0; r < R; ++r) {
            __m256 x = _mm256_broadcast_ss(ar + r * d + 2 * p + 1);
            acc[r][0] = _mm256_fmadd_ps(x, odd0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(x, odd1, acc[r][1]);
        }
        for (int r = 0; r < R; ++r) {
            __m256 x = _mm256_broadcast_ss(ar + r * d + 2 * p);
            acc[r][0] = _mm256_fmadd_ps(x, even0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(x, even1, acc[r][1]);
        }
    }
    for (int r = 0; r < R; ++r) {
        store8(c + r * c_row, acc[r][0], cols);
        if (cols > 8)
            store8(c + r * c_row + 8, acc[r][1], cols - 8);
    }
}

void pe_bf16_rows_avx2(const struct pe_bf16_gemm *g, ptrdiff_t h, ptrdiff_t m0, ptrdiff_t m1,
                       void *pack_at, int pack_now)
{
    unsigned int csr = _mm_getcsr();
    _mm_setcsr(csr | MXCSR_FTZ_DAZ);
    ptrdiff_t d = g->d, n_len = g->n_len;
    float *pk = pack_at, *ar = pk + (n_len + 31) / 32 * 32 * d;
    if (pack_now)
        pack(g, g->b + h * g->b_head, pk);
    const uint16_t *a = g->a + h * g->a_head;
    const float *init = g->init != NULL ? g->init + h * g->init_head : NULL;
    for (ptrdiff_t m = m0; m < m1; m += ROWS) {
        int R = m1 - m < ROWS ? (int)(m1 - m) : ROWS;
        for (int r = 0; r < R; ++r)
            for (ptrdiff_t p = 0; p < d; ++p)
                ar[r * d + p] = widen(a[(m + r) * g->a_row + p]);
        float *c = g->c + h * g->c_head + m * g->c_row;
        ptrdiff_t lo, hi;
        pe_bf16_columns(g, m, PANEL, &lo, &hi);
        pe_bf16_zero_outside(c, g->c_row, R, lo, hi, n_len);
        for (ptrdiff_t q = lo / PANEL; q < (hi + PANEL - 1) / PANEL; ++q) {
            const float *panel = pk + q * d * PANEL;
            const float *iq = init != NULL ? init + q * PANEL : NULL;
            ptrdiff_t cols = n_len - q * PANEL < PANEL ? n_len - q * PANEL : PANEL;
            if (R == ROWS) { /* a whole tile; the last rows of a task one at a time */
                tile(ar, d, panel, iq, c + q * PANEL, g->c_row, cols, ROWS);
                continue;
            }
            for (int r = 0; r < R; ++r)
                tile(ar + r * d, d, panel, iq, c + r * g->c_row + q * PANEL, g->c_row, cols, 1);
        }
    }
    _mm_setcsr(csr);
}

PE_AVX2_END
#endif
