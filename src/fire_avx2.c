/*
 * fire_avx2.c -- fire.c's MLP on the AVX2 path: four keys in a vector, each
 * lane the portable kernel's operations in its order (multiplies and adds,
 * no FMA; max(pre, 0) as MAXPD takes it, +0.0 for -0.0 as the portable
 * kernel), so the same bits.  The second layer keeps four heads by eight
 * keys in registers, the hidden units streamed past them from L1: two
 * loads and four broadcasts per eight multiplies and eight adds.  A block
 * of eight keys makes its hidden layer, then every head's values from it;
 * with skip_zeros it keeps and sums only the hidden units that are nonzero
 * at one of its keys (fire.c says why the bits stay the same).
 */
#include "pe.h"
#include "simd.h"

#include "avx2.h"

#if PE_X86
/* Heads [h, h + H) (H of 1 to 4, a constant) at the eight keys of a block:
 * out (column j) = the products of the block's used hidden units (unit
 * ws[u] at hidden + 8 u, u < count) and the heads' rows of w2, summed in
 * that order, then b2 (0 + b2 without units). */
PE_INLINE void fire_heads(const struct pe_fire *f, const double *hidden, const int32_t *ws,
                          ptrdiff_t count, ptrdiff_t h, double *out, ptrdiff_t stride, const int H)
{
    const ptrdiff_t width = f->width;
    const double *v = f->w2 + h * width;
    __m256d acc[4][2];
    for (int a = 0; a < H; ++a)
        acc[a][0] = acc[a][1] = _mm256_setzero_pd();
    if (count > 0) {
        __m256d lo = _mm256_loadu_pd(hidden), hi = _mm256_loadu_pd(hidden + 4);
        for (int a = 0; a < H; ++a) {
            __m256d c = _mm256_broadcast_sd(v + a * width + ws[0]);
            acc[a][0] = _mm256_mul_pd(lo, c);
            acc[a][1] = _mm256_mul_pd(hi, c);
        }
    }
    for (ptrdiff_t u = 1; u < count; ++u) {
        __m256d lo = _mm256_loadu_pd(hidden + 8 * u), hi = _mm256_loadu_pd(hidden + 8 * u + 4);
        for (int a = 0; a < H; ++a) {
            __m256d c = _mm256_broadcast_sd(v + a * width + ws[u]);
            acc[a][0] = _mm256_add_pd(acc[a][0], _mm256_mul_pd(lo, c));
            acc[a][1] = _mm256_add_pd(acc[a][1], _mm256_mul_pd(hi, c));
        }
    }
    for (int a = 0; a < H; ++a) {
        __m256d b = _mm256_broadcast_sd(f->b2 + h + a);
        double *o = out + (h + a) * stride;
        _mm256_storeu_pd(o, _mm256_add_pd(acc[a][0], b));
        _mm256_storeu_pd(o + 4, _mm256_add_pd(acc[a][1], b));
    }
}

/* The hidden layer at a block's eight keys: the units it uses (all of them
 * without skip_zeros) at hidden + 8 u, their numbers in ws[u]; returns how
 * many. */
PE_INLINE ptrdiff_t fire_hidden(const struct pe_fire *f, const double *x, double *hidden,
                                int32_t *ws)
{
    const __m256d zero = _mm256_setzero_pd();
    const __m256d x0 = _mm256_loadu_pd(x), x1 = _mm256_loadu_pd(x + 4);
    const ptrdiff_t width = f->width;
    const int all = !f->skip_zeros;
    ptrdiff_t count = 0;
    for (ptrdiff_t w = 0; w < width; ++w) {
        __m256d a = _mm256_broadcast_sd(f->w1 + w), c = _mm256_broadcast_sd(f->b1 + w);
        __m256d lo = _mm256_add_pd(_mm256_mul_pd(x0, a), c);
        __m256d hi = _mm256_add_pd(_mm256_mul_pd(x1, a), c);
        /* stored in the next free place, kept if used: no branch on data */
        _mm256_storeu_pd(hidden + 8 * count, _mm256_max_pd(lo, zero));
        _mm256_storeu_pd(hidden + 8 * count + 4, _mm256_max_pd(hi, zero));
        ws[count] = (int32_t)w;
        __m256d used =
            _mm256_or_pd(_mm256_cmp_pd(lo, zero, _CMP_GT_OQ), _mm256_cmp_pd(hi, zero, _CMP_GT_OQ));
        count += all | (_mm256_movemask_pd(used) != 0);
    }
    return count;
}

void pe_fire_block_avx2(const struct pe_fire *f, const double *x, ptrdiff_t n, double *scratch,
                        double *out, ptrdiff_t stride)
{
    const ptrdiff_t width = f->width, heads = f->heads;
    /* block b: its used units' values at scratch + b * 8 * width, their
     * numbers at ws + b * width */
    int32_t *ws = (int32_t *)(scratch + width * n);
    for (ptrdiff_t b = 0; b < n / 8; ++b) {
        double *hidden = scratch + b * 8 * width, *o = out + 8 * b;
        int32_t *wb = ws + b * width;
        ptrdiff_t count = fire_hidden(f, x + 8 * b, hidden, wb), h = 0;
        for (; h + 4 <= heads; h += 4)
            fire_heads(f, hidden, wb, count, h, o, stride, 4);
        if (heads - h == 3)
            fire_heads(f, hidden, wb, count, h, o, stride, 3);
        else if (heads - h == 2)
            fire_heads(f, hidden, wb, count, h, o, stride, 2);
        else if (heads - h == 1)
            fire_heads(f, hidden, wb, count, h, o, stride, 1);
    }
}

PE_AVX2_END
#endif
