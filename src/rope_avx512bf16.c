/*
 * rope_avx512bf16.c -- the row kernels of apply_rope on the AVX-512 path
 * of CPUs with AVX-512 BF16, for bfloat16 rows in the "half" and
 * interleaved layouts: sixteen pairs per step, widened by shifts, rotated
 * in float32 as rope_run.c rotates them, and rounded back by
 * VCVTNEPS2BF16 (a vector holding a subnormal the integer way, as
 * avx512.h's pe_half16_from_ps), so the same bits; each cos/sin vector
 * loaded once for the PE_ROPE_LANES rows that share it, large outputs
 * written with non-temporal stores as rope_avx2.c writes them.  The other
 * dtypes and layouts, and the AVX-512 path without BF16, are the AVX2
 * kernels: memory bound, or bound by conversions AVX-512 F does not make
 * cheaper.
 */
#define PE_AVX512_BF16 1

#include "pe.h"
#include "rope.h"
#include "simd.h"

#include "avx512.h"

#if PE_X86
/* 32 or 64 bytes at p (16-byte aligned with stream: non-temporal stores,
 * ordered by the caller's _mm_sfence). */
PE_INLINE void store256(void *p, __m256i v, const int stream)
{
    if (stream) {
        _mm_stream_si128((__m128i *)p, _mm256_castsi256_si128(v));
        _mm_stream_si128((__m128i *)p + 1, _mm256_extracti128_si256(v, 1));
    } else {
        _mm256_storeu_si256((__m256i *)p, v);
    }
}

PE_INLINE void store512(void *p, __m512i v, const int stream)
{
    if (stream) {
        store256(p, _mm512_castsi512_si256(v), 1);
        store256((char *)p + 32, _mm512_extracti64x4_epi64(v, 1), 1);
    } else {
        _mm512_storeu_si512(p, v);
    }
}

/* (a, b) -> (a c - b s, b c + a s) on sixteen pairs (rope_avx2.c's rot8). */
PE_INLINE void rot16(__m512 a, __m512 b, __m512 c, __m512 s, __m512 *ra, __m512 *rb)
{
    *ra = _mm512_fmsub_ps(a, c, _mm512_mul_ps(b, s));
    *rb = _mm512_fmadd_ps(b, c, _mm512_mul_ps(a, s));
}

/* The a and b of sixteen pairs rounded to bfloat16 (pe_bf16_from_f32) and
 * interleaved, a0 b0 a1 b1 ... */
PE_INLINE __m512i bf16_pairs(__m512 a, __m512 b)
{
    if (!(_mm512_fpclass_ps_mask(a, 0x20) | _mm512_fpclass_ps_mask(b, 0x20))) {
        const __m512i idx = _mm512_setr_epi32(0x00100000, 0x00110001, 0x00120002, 0x00130003,
                                              0x00140004, 0x00150005, 0x00160006, 0x00170007,
                                              0x00180008, 0x00190009, 0x001A000A, 0x001B000B,
                                              0x001C000C, 0x001D000D, 0x001E000E, 0x001F000F);
        __m512bh h = _mm512_cvtne2ps_pbh(b, a); /* a's sixteen, then b's */
        __m512i v;
        memcpy(&v, &h, sizeof v);
        return _mm512_permutexvar_epi16(idx, v);
    }
    __m512i ra = pe_bf16_rounded16(a), rb = pe_bf16_rounded16(b);
    return _mm512_mask_blend_epi16(0xAAAAAAAAu, _mm512_srli_epi32(ra, 16), rb);
}

/* Sixteen bfloat16 elements at p as floats. */
PE_INLINE __m512 load16(const uint16_t *p)
{
    return pe_ps_from_half16(_mm256_loadu_si256((const __m256i *)p), PE_BF16);
}

/* One row's cos/sin applied to the `lanes` rows that share it (rope_avx2.c's
 * rows_avx2 for bfloat16, sixteen pairs a step), the rest by
 * pe_rope_rotate_row. */
PE_INLINE void rows_bf16(const char *x0, ptrdiff_t lxs, char *o0, ptrdiff_t los, ptrdiff_t lanes,
                         const char *t, ptrdiff_t half, const int layout, const int stream)
{
    const float *c = (const float *)t, *s = c + half;
    ptrdiff_t i = 0;
    for (; i + 16 <= half; i += 16) {
        const __m512 cv = _mm512_loadu_ps(c + i), sv = _mm512_loadu_ps(s + i);
        for (ptrdiff_t g = 0; g < lanes; ++g) {
            const uint16_t *x = (const uint16_t *)(x0 + g * lxs);
            uint16_t *o = (uint16_t *)(o0 + g * los);
            __m512 ra, rb;
            if (layout == PE_ROPE_HALF) {
                rot16(load16(x + i), load16(x + half + i), cv, sv, &ra, &rb);
                store256(o + i, pe_half16_from_ps(ra, PE_BF16), stream);
                store256(o + half + i, pe_half16_from_ps(rb, PE_BF16), stream);
            } else {
                /* each 32-bit word: a pair, a in its low half, b in its high */
                __m512i h = _mm512_loadu_si512(x + 2 * i);
                __m512 a = _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
                __m512 b = _mm512_castsi512_ps(_mm512_and_si512(h, _mm512_set1_epi32(-65536)));
                rot16(a, b, cv, sv, &ra, &rb);
                store512(o + 2 * i, bf16_pairs(ra, rb), stream);
            }
        }
    }
    for (ptrdiff_t g = 0; g < lanes; ++g)
        pe_rope_rotate_row(x0 + g * lxs, o0 + g * los, t, half, i, layout, PE_BF16);
}

PE_INLINE void run_loop(const struct pe_rope_run *r, const int layout, const int stream)
{
    for (ptrdiff_t m = 0; m < r->n; ++m) {
        const char *x = r->x + m * r->xs;
        char *o = r->o + m * r->os;
        rows_bf16(x, r->lxs, o, r->los, r->lanes, r->tab + m * r->ts, r->half, layout, stream);
        for (ptrdiff_t g = 0; g < r->lanes; ++g)
            pe_rope_pass_through(x + g * r->lxs, o + g * r->los, r->half, r->dim, PE_BF16);
    }
}

/* bytes (a multiple of 16) from src to 16-byte aligned dst, with
 * non-temporal stores (avx2.h's pe_stream_copy). */
PE_INLINE void stream_copy(char *dst, const char *src, ptrdiff_t bytes)
{
    ptrdiff_t k = 0;
    for (; k + 64 <= bytes; k += 64)
        store512(dst + k, _mm512_loadu_si512(src + k), 1);
    for (; k < bytes; k += 16)
        _mm_stream_si128((__m128i *)(dst + k), _mm_loadu_si128((const __m128i *)(src + k)));
}

/* Each row of all lanes rotated into a buffer in L1, then streamed out one
 * lane after the other (rope_avx2.c's run_avx2_bounced). */
PE_INLINE void run_bounced(const struct pe_rope_run *r, const int layout)
{
    ptrdiff_t rb = 2 * r->half * 2;
    for (ptrdiff_t m = 0; m < r->n; ++m) {
        const char *x = r->x + m * r->xs;
        char *o = r->o + m * r->os;
        rows_bf16(x, r->lxs, r->bounce, rb, r->lanes, r->tab + m * r->ts, r->half, layout, 0);
        for (ptrdiff_t g = 0; g < r->lanes; ++g) {
            stream_copy(o + g * r->los, r->bounce + g * rb, rb);
            pe_rope_pass_through(x + g * r->lxs, o + g * r->los, r->half, r->dim, PE_BF16);
        }
    }
}

/* rope_avx2.c's run_avx2 for bfloat16 in the "half" and interleaved
 * layouts (the same choice of stores); the AVX2 kernel otherwise. */
PE_INLINE void run_avx512(const struct pe_rope_run *r, const int layout, const int dtype)
{
    if (dtype != PE_BF16 || (layout != PE_ROPE_HALF && layout != PE_ROPE_INTERLEAVED)) {
        pe_rope_run_avx2[layout][dtype](r);
        return;
    }
    ptrdiff_t half_bytes = r->half * 2;
    int stream = r->stream && r->x != r->o && (uintptr_t)r->o % 16 == 0 &&
                 (r->n == 1 || r->os % 16 == 0) && (r->lanes == 1 || r->los % 16 == 0) &&
                 (layout == PE_ROPE_INTERLEAVED || half_bytes % 16 == 0);
    if (stream && r->lanes > 1 && half_bytes % 8 == 0) {
        run_bounced(r, layout);
        _mm_sfence();
    } else if (stream && r->lanes == 1) {
        run_loop(r, layout, 1);
        _mm_sfence();
    } else {
        run_loop(r, layout, 0);
    }
}

PE_SPECIALISE_ROPE(const pe_rope_run_fn, pe_rope_run_avx512_bf16, run_avx512,
                   (const struct pe_rope_run *r), (r));

PE_AVX512_END
#endif
