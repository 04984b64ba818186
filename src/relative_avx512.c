/*
 * relative_avx512.c -- the gather of relative.c on the AVX-512 path, by
 * query into float32 scores: sixteen scores at a time, the last n % 16 of a
 * segment under a mask instead of one at a time, each score taking the same
 * one add of the same product as the portable path and the AVX2 one give it
 * (scores first, product second, as they add them), so the same bits.
 *
 * As in relative_avx2.c, a row walks the segments of the map its distances
 * cross: a run of slope 1 is an unaligned load of the products, a run of -1
 * a load reversed (VPERMPS), a run of slope 0 a broadcast, and several
 * short runs together (log buckets) two windows of eight columns, each
 * within 8 of its least, loaded and merged by one VPERMT2PS (the lanes from
 * relative.h's table of eight bytes a window), else a gather of sixteen
 * through the map.  A tail reads only the products its lanes name (masked
 * loads and gathers), and writes only its own scores.
 *
 * The other tasks (by key, and by query into float16, bfloat16 and float64
 * scores) are the AVX2 ones: their AVX-512 bodies gained nothing measurable
 * (docs/performance.md).
 */
#include "pe.h"
#include "relative.h"
#include "simd.h"

#include "avx512.h"

#if PE_X86
/* The sixteen lanes of the windows at t and t + 8 (relative.h's perm), the
 * second's as lanes 16 .. 24 of VPERMT2PS's two sources. */
PE_INLINE __m512i lanes16(const uint8_t *perm)
{
    __m128i a = _mm_loadl_epi64((const __m128i *)perm);
    __m128i b = _mm_loadl_epi64((const __m128i *)(perm + 64));
    return _mm512_add_epi32(
        _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(a, b)),
        _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 16, 16, 16, 16, 16, 16, 16, 16));
}

/* The products of the eight scores m .. m + 8 of a segment of slope 2: a
 * load permuted where the window lo = wmin[m] is, else a gather. */
PE_INLINE __m256 half8(const float *x, const int32_t *map, int32_t lo, const uint8_t *perm,
                       ptrdiff_t m)
{
    return lo >= 0 ? _mm256_permutevar8x32_ps(
                         _mm256_loadu_ps(x + lo),
                         _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(perm + 8 * m))))
                   : _mm256_i32gather_ps(x, _mm256_loadu_si256((const __m256i *)(map + m)), 4);
}

/* The float32 products of scores m .. m + 16 of a segment (segment16's
 * arguments). */
PE_INLINE __m512 products16(const float *x, ptrdiff_t col, int slope, const int32_t *map,
                            const int32_t *wmin, const uint8_t *perm, ptrdiff_t m)
{
    if (slope == 1)
        return _mm512_loadu_ps(x + col + m);
    if (slope == 0)
        return _mm512_set1_ps(x[col]);
    if (slope == -1)
        return _mm512_permutexvar_ps(
            _mm512_setr_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
            _mm512_loadu_ps(x + col - m - 15));
    int32_t lo = wmin[m], hi = wmin[m + 8];
    if ((lo | hi) >= 0) /* both windows within 8 of their least */
        return _mm512_permutex2var_ps(_mm512_castps256_ps512(_mm256_loadu_ps(x + lo)),
                                      lanes16(perm + 8 * m),
                                      _mm512_castps256_ps512(_mm256_loadu_ps(x + hi)));
    return _mm512_insertf32x8(_mm512_castps256_ps512(half8(x, map, lo, perm, m)),
                              half8(x, map, hi, perm, m + 8), 1);
}

/* The products of the r < 16 scores m .. m + r of a segment, in lanes
 * 0 .. r (the rest zero or any value): only those products read. */
PE_INLINE __m512 tail16(const float *x, ptrdiff_t col, int slope, const int32_t *map,
                        const int32_t *wmin, const uint8_t *perm, ptrdiff_t m, ptrdiff_t r,
                        __mmask16 k)
{
    if (slope == 1)
        return _mm512_maskz_loadu_ps(k, x + col + m);
    if (slope == 0)
        return _mm512_set1_ps(x[col]);
    if (slope == -1) /* x[col - m - r + 1 .. col - m] reversed: lane l is r - 1 - l */
        return _mm512_permutexvar_ps(_mm512_sub_epi32(_mm512_set1_epi32((int)r - 1),
                                                      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8,
                                                                        9, 10, 11, 12, 13, 14, 15)),
                                     _mm512_maskz_loadu_ps(k, x + col - m - r + 1));
    /* slope 2: whole windows of eight as products16 has them, the rest
     * gathered under a mask */
    __m256 a, b = _mm256_setzero_ps();
    if (r >= 8) {
        a = half8(x, map, wmin[m], perm, m);
        __mmask8 k8 = (__mmask8)(k >> 8);
        b = _mm256_mmask_i32gather_ps(b, k8, _mm256_maskz_loadu_epi32(k8, map + m + 8), x, 4);
    } else {
        a = _mm256_mmask_i32gather_ps(b, (__mmask8)k,
                                      _mm256_maskz_loadu_epi32((__mmask8)k, map + m), x, 4);
    }
    return _mm512_insertf32x8(_mm512_castps256_ps512(a), b, 1);
}

/* Scores o[0 .. n) of a row += the float32 products x (the row's own) at
 * the columns of segment kind `slope` (relative_avx2.c's segment): sixteen
 * at a time, then the rest under a mask. */
PE_INLINE void segment16(float *o, const float *x, ptrdiff_t col, const int slope,
                         const int32_t *map, const int32_t *wmin, const uint8_t *perm, ptrdiff_t n)
{
    ptrdiff_t m = 0;
    if (slope == 2) { /* eight at a time (sixteen measured slower), the rest under a mask */
        for (; m + 8 <= n; m += 8)
            _mm256_storeu_ps(
                o + m, _mm256_add_ps(_mm256_loadu_ps(o + m), half8(x, map, wmin[m], perm, m)));
        for (; m < n; ++m)
            o[m] = o[m] + x[map[m]];
        return;
    }
    /* a head under a mask up to the scores' next line, if there is one */
    ptrdiff_t head = (ptrdiff_t)((64 - ((uintptr_t)o & 63)) & 63) / 4;
    if ((slope == 1 || slope == -1) && n >= 64 && head > 0 && ((uintptr_t)o & 3) == 0) {
        __mmask16 k = (__mmask16)((1u << head) - 1);
        _mm512_mask_storeu_ps(o, k,
                              _mm512_add_ps(_mm512_maskz_loadu_ps(k, o),
                                            tail16(x, col, slope, map, wmin, perm, 0, head, k)));
        m = head;
    }
    for (; m + 16 <= n; m += 16)
        _mm512_storeu_ps(o + m, _mm512_add_ps(_mm512_loadu_ps(o + m),
                                              products16(x, col, slope, map, wmin, perm, m)));
    if (m < n) {
        __mmask16 k = (__mmask16)((1u << (n - m)) - 1);
        _mm512_mask_storeu_ps(o + m, k,
                              _mm512_add_ps(_mm512_maskz_loadu_ps(k, o + m),
                                            tail16(x, col, slope, map, wmin, perm, m, n - m, k)));
    }
}

/* Row task of the (batch * heads * q_len) rows, float32 scores
 * (relative_avx2.c's row_avx2). */
static void row_f32(const struct pe_rel_gather *g, ptrdiff_t task)
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
    float *row = (float *)(d->data + b * d->stride_b + h * d->stride_h + i * d->stride_q);
    const float *prod = (const float *)(s->data + (s->batch == 1 ? 0 : b) * s->stride_b +
                                        h * s->stride_h + i * s->stride_r);
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
        float *o = row + (a - t0);
        const int32_t *map = g->map32 + a, *wmin = g->wmin + a;
        const uint8_t *perm = g->perm + 8 * a;
        /* each kind its own loop (products16 inlined with the slope known) */
        if (seg->slope == 1)
            segment16(o, prod, col, 1, map, wmin, perm, e - a);
        else if (seg->slope == 0)
            segment16(o, prod, col, 0, map, wmin, perm, e - a);
        else if (seg->slope == -1)
            segment16(o, prod, col, -1, map, wmin, perm, e - a);
        else
            segment16(o, prod, col, 2, map, wmin, perm, e - a);
    }
}

/* The AVX-512 path's tasks: its own by query into float32 scores, the AVX2
 * ones for the rest. */
PE_INLINE void task_avx512(const struct pe_rel_gather *g, ptrdiff_t task, const int by_key,
                           const int dtype)
{
    if (!by_key && dtype == PE_F32)
        row_f32(g, task);
    else
        pe_rel_task_avx2[by_key][dtype](g, task);
}

PE_SPECIALISE(const pe_rel_task_fn, pe_rel_task_avx512, task_avx512,
              (const struct pe_rel_gather *g, ptrdiff_t task), (g, task));

PE_AVX512_END
#endif
