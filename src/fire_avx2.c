/*
 * fire_avx2.c -- fire.c's MLP on the AVX2 path: four keys in a vector, each
 * lane the portable kernel's operations in its order (multiplies and adds,
 * no FMA; max(pre, 0) as MAXPD takes it, +0.0 for -0.0 as the portable
 * kernel), so the same bits.  The second layer keeps four heads by eight
 * keys in registers, the hidden units streamed past them from L1: two
 * loads and four broadcasts per eight multiplies and eight adds.  With
 * skip_zeros, a block of eight keys sums only the hidden units that are
 * nonzero at one of its keys (fire.c says why the bits stay the same).
 */
#include "pe.h"
#include "simd.h"

#include "avx2.h"

#if PE_X86
/* Heads [h, h + H) (H of 1 to 4, a constant) at keys [j, j + 8): out = the
 * products of the hidden units ws[0 .. count) and the heads' rows of w2,
 * summed in that order, then b2 (0 + b2 without units). */
PE_INLINE void fire_heads(const struct pe_fire *f, const double *hidden, ptrdiff_t n, ptrdiff_t h,
                          ptrdiff_t j, const int32_t *ws, ptrdiff_t count, double *out,
                          ptrdiff_t stride, const int H)
{
    const ptrdiff_t width = f->width;
    const double *v = f->w2 + h * width;
    __m256d acc[4][2];
    for (int a = 0; a < H; ++a)
        acc[a][0] = acc[a][1] = _mm256_setzero_pd();
    if (count > 0) {
        const double *x = hidden + ws[0] * n + j;
        __m256d lo = _mm256_loadu_pd(x), hi = _mm256_loadu_pd(x + 4);
        for (int a = 0; a < H; ++a) {
            __m256d c = _mm256_broadcast_sd(v + a * width + ws[0]);
            acc[a][0] = _mm256_mul_pd(lo, c);
            acc[a][1] = _mm256_mul_pd(hi, c);
        }
    }
    for (ptrdiff_t u = 1; u < count; ++u) {
        const double *x = hidden + ws[u] * n + j;
        __m256d lo = _mm256_loadu_pd(x), hi = _mm256_loadu_pd(x + 4);
        for (int a = 0; a < H; ++a) {
            __m256d c = _mm256_broadcast_sd(v + a * width + ws[u]);
            acc[a][0] = _mm256_add_pd(acc[a][0], _mm256_mul_pd(lo, c));
            acc[a][1] = _mm256_add_pd(acc[a][1], _mm256_mul_pd(hi, c));
        }
    }
    for (int a = 0; a < H; ++a) {
        __m256d b = _mm256_broadcast_sd(f->b2 + h + a);
        double *o = out + (h + a) * stride + j;
        _mm256_storeu_pd(o, _mm256_add_pd(acc[a][0], b));
        _mm256_storeu_pd(o + 4, _mm256_add_pd(acc[a][1], b));
    }
}

void pe_fire_block_avx2(const struct pe_fire *f, const double *x, ptrdiff_t n, double *scratch,
                        double *out, ptrdiff_t stride)
{
    const ptrdiff_t width = f->width, nb = n / 8;
    const __m256d zero = _mm256_setzero_pd();
    /* the hidden layer (width rows of n), then for block b the units it
     * sums, ws[b * width ..], and how many, count[b] */
    double *hidden = scratch;
    int32_t *ws = (int32_t *)(scratch + width * n), *count = ws + nb * width;
    for (ptrdiff_t b = 0; b < nb; ++b)
        count[b] = 0;
    for (ptrdiff_t w = 0; w < width; ++w) {
        __m256d a = _mm256_set1_pd(f->w1[w]), c = _mm256_set1_pd(f->b1[w]);
        for (ptrdiff_t b = 0; b < nb; ++b) {
            const double *xb = x + 8 * b;
            __m256d lo = _mm256_add_pd(_mm256_mul_pd(_mm256_loadu_pd(xb), a), c);
            __m256d hi = _mm256_add_pd(_mm256_mul_pd(_mm256_loadu_pd(xb + 4), a), c);
            _mm256_storeu_pd(hidden + w * n + 8 * b, _mm256_max_pd(lo, zero));
            _mm256_storeu_pd(hidden + w * n + 8 * b + 4, _mm256_max_pd(hi, zero));
            __m256d used = _mm256_or_pd(_mm256_cmp_pd(lo, zero, _CMP_GT_OQ),
                                        _mm256_cmp_pd(hi, zero, _CMP_GT_OQ));
            if (!f->skip_zeros || _mm256_movemask_pd(used))
                ws[b * width + count[b]++] = (int32_t)w;
        }
    }
    ptrdiff_t h = 0;
    for (; h + 4 <= f->heads; h += 4)
        for (ptrdiff_t b = 0; b < nb; ++b)
            fire_heads(f, hidden, n, h, 8 * b, ws + b * width, count[b], out, stride, 4);
    ptrdiff_t rest = f->heads - h;
    for (ptrdiff_t b = 0; rest > 0 && b < nb; ++b) {
        if (rest == 3)
            fire_heads(f, hidden, n, h, 8 * b, ws + b * width, count[b], out, stride, 3);
        else if (rest == 2)
            fire_heads(f, hidden, n, h, 8 * b, ws + b * width, count[b], out, stride, 2);
        else
            fire_heads(f, hidden, n, h, 8 * b, ws + b * width, count[b], out, stride, 1);
    }
}

PE_AVX2_END
#endif
