/*
 * bias_avx2.c -- the rows and the ALiBi vectors of bias.c on the AVX2 path:
 * adds eight floats (float16 through F16C, bfloat16 through shifts) or four
 * doubles at a time, row copies with vector stores, non-temporal ones for
 * large fills, ALiBi's products and selects four at a time, and a T5
 * gradient summed along eight or four diagonals at a time: the arithmetic
 * of the portable kernels, so the same bits.
 */
#include "bias.h"
#include "pe.h"
#include "simd.h"

#include "avx2.h"

#if PE_X86
/* ---- rows: copy or add a slice of the per-head vector ---- */

/* A row copy with vector stores: plain ones (memcpy's "rep movsb" for rows
 * of a few KiB is slower than this on some CPUs), or non-temporal ones for
 * the 32-byte-aligned middle of the row. */
PE_INLINE void copy_row(char *dst, const char *src, size_t nbytes, const int stream)
{
    size_t b = 0;
    if (stream) {
        b = (32 - ((uintptr_t)dst & 31)) & 31;
        b = b > nbytes ? nbytes : b;
        memcpy(dst, src, b);
    }
    for (; b + 128 <= nbytes; b += 128) {
        __m256i v0 = _mm256_loadu_si256((const __m256i *)(src + b));
        __m256i v1 = _mm256_loadu_si256((const __m256i *)(src + b + 32));
        __m256i v2 = _mm256_loadu_si256((const __m256i *)(src + b + 64));
        __m256i v3 = _mm256_loadu_si256((const __m256i *)(src + b + 96));
        pe_store_si256(dst + b, v0, stream);
        pe_store_si256(dst + b + 32, v1, stream);
        pe_store_si256(dst + b + 64, v2, stream);
        pe_store_si256(dst + b + 96, v3, stream);
    }
    for (; b + 32 <= nbytes; b += 32)
        pe_store_si256(dst + b, _mm256_loadu_si256((const __m256i *)(src + b)), stream);
    memcpy(dst + b, src + b, nbytes - b);
}

/* Rows [r0, r1) (bias.c's rows_scalar); streamed stores are ordered by the
 * caller (store_fence) before its threads hand the array back. */
PE_INLINE void rows_avx2(const struct pe_toeplitz *t, ptrdiff_t r0, ptrdiff_t r1, const int op,
                         const int dtype)
{
    const size_t isz = pe_itemsize(dtype);
    ptrdiff_t k = t->d->k_len;
    const char *src;
    if (op == PE_BIAS_ADD) {
        for (ptrdiff_t r = r0; r < r1; ++r) {
            char *row = pe_toeplitz_row(t, r, isz, &src);
            pe_row_add_simd(row, src, k, PE_ROW_SAME, dtype);
        }
    } else if (t->stream) {
        for (ptrdiff_t r = r0; r < r1; ++r) {
            char *row = pe_toeplitz_row(t, r, isz, &src);
            copy_row(row, src, (size_t)k * isz, 1);
        }
    } else {
        for (ptrdiff_t r = r0; r < r1; ++r) {
            char *row = pe_toeplitz_row(t, r, isz, &src);
            copy_row(row, src, (size_t)k * isz, 0);
        }
    }
}

PE_SPECIALISE(const pe_bias_rows_fn, pe_bias_rows_avx2, rows_avx2,
              (const struct pe_toeplitz *t, ptrdiff_t r0, ptrdiff_t r1), (t, r0, r1));

void pe_store_fence_avx2(void)
{
    _mm_sfence();
}

/* ---- T5's backward pass ---- */

/* The eight elements of row m of a tile that lie on the diagonals t ..
 * t + 7, which that row reaches, as float32 (float16, bfloat16 exactly). */
PE_INLINE __m256 tile_load8(const struct pe_diag_tile *w, ptrdiff_t m, ptrdiff_t t, const int dtype)
{
    const char *row = w->row0 + m * w->stride;
    ptrdiff_t j = t - w->base + m;
    if (dtype == PE_F32)
        return _mm256_loadu_ps((const float *)row + j);
    return pe_ps_from_half8(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + j)), dtype);
}

/* bias.c's diagonals_scalar, eight diagonals at a time in float32 (four of
 * float64 in float64) wherever every row of the tile reaches them: the
 * tile's rows summed in registers in the order of i, from 0, then added
 * into the diagonals' sums, as pe_diagonal_sums does one diagonal at a
 * time.  (The pairs T5's backward pass does not use, float64 rows in
 * float32 and the others in float64, go one diagonal at a time.) */
PE_INLINE void diagonals_avx2(const struct pe_diagonals *s, ptrdiff_t h, const int acc64,
                              const int dtype)
{
    const struct pe_bias_dst *g = s->g;
    const int vector = acc64 == (dtype == PE_F64);
    const ptrdiff_t step = acc64 ? 4 : 8;
    for (ptrdiff_t b = 0; b < g->batch; ++b)
        for (ptrdiff_t i0 = 0; i0 < g->q_len; i0 += PE_DIAG_TILE) {
            struct pe_diag_tile w = pe_diagonal_tile(s, b, h, i0, acc64);
            /* the diagonals every row of the tile reaches: base .. base + k - r */
            ptrdiff_t t = w.base, end = vector ? w.base + w.k - w.r + 1 : w.base;
            pe_diagonal_sums(&w, w.base - w.r + 1, w.base, acc64, dtype);
            for (; t + step <= end; t += step) {
                if (acc64) {
                    __m256d acc = _mm256_setzero_pd();
                    for (ptrdiff_t m = 0; m < w.r; ++m) {
                        const double *row = (const double *)(w.row0 + m * w.stride);
                        acc = _mm256_add_pd(acc, _mm256_loadu_pd(row + (t - w.base + m)));
                    }
                    double *d = (double *)w.sums + t;
                    _mm256_storeu_pd(d, _mm256_add_pd(_mm256_loadu_pd(d), acc));
                } else {
                    __m256 acc = _mm256_setzero_ps();
                    for (ptrdiff_t m = 0; m < w.r; ++m)
                        acc = _mm256_add_ps(acc, tile_load8(&w, m, t, dtype));
                    float *d = (float *)w.sums + t;
                    _mm256_storeu_ps(d, _mm256_add_ps(_mm256_loadu_ps(d), acc));
                }
            }
            pe_diagonal_sums(&w, t, w.base + w.k, acc64, dtype);
        }
}

PE_SPECIALISE(const pe_diagonals_fn, pe_diagonals_avx2, diagonals_avx2,
              (const struct pe_diagonals *s, ptrdiff_t h), (s, h));

/* ---- ALiBi ---- */

/* The first n - n % 4 elements of a counted block, float32 or float64, four
 * at a time: the products and selects of pe_alibi_value, the same bits. */
PE_INLINE ptrdiff_t alibi_vector(char *o, ptrdiff_t n, double base, double slope, const int causal,
                                 const int dtype)
{
    const __m256d vs = _mm256_set1_pd(slope), four = _mm256_set1_pd(4.0);
    const __m256d zero = _mm256_setzero_pd(), neg = _mm256_set1_pd(-0.0);
    const __m256d ninf = _mm256_set1_pd(-INFINITY);
    __m256d d = _mm256_add_pd(_mm256_set1_pd(base), _mm256_setr_pd(0.0, 1.0, 2.0, 3.0));
    ptrdiff_t t = 0;
    for (; t + 4 <= n; t += 4) {
        __m256d below = _mm256_mul_pd(vs, d);
        __m256d above = causal ? ninf : _mm256_mul_pd(vs, _mm256_xor_pd(d, neg));
        __m256d v = _mm256_blendv_pd(below, above, _mm256_cmp_pd(d, zero, _CMP_GT_OQ));
        if (dtype == PE_F32)
            _mm_storeu_ps((float *)o + t, _mm256_cvtpd_ps(v));
        else
            _mm256_storeu_pd((double *)o + t, v);
        d = _mm256_add_pd(d, four);
    }
    return t;
}

/* bias.c's alibi_scalar, float32 and float64 four at a time. */
PE_INLINE void alibi_avx2(char *o, ptrdiff_t t0, ptrdiff_t t1, int64_t d0, double slope,
                          const int causal, const int dtype)
{
    ptrdiff_t n = t1 - t0, t = 0;
    if (!pe_alibi_counts(d0)) {
        pe_alibi_tail(o, t0, 0, n, d0, slope, 0, causal, dtype);
        return;
    }
    if (dtype == PE_F32 || dtype == PE_F64)
        t = alibi_vector(o + t0 * (ptrdiff_t)pe_itemsize(dtype), n, (double)d0, slope, causal,
                         dtype);
    pe_alibi_tail(o, t0, t, n, d0, slope, 1, causal, dtype);
}

PE_SPECIALISE(const pe_alibi_block_fn, pe_alibi_block_avx2, alibi_avx2,
              (char *o, ptrdiff_t t0, ptrdiff_t t1, int64_t d0, double slope),
              (o, t0, t1, d0, slope));

PE_AVX2_END
#endif
