/*
 * rope_avx2.c -- the row kernels of apply_rope on the AVX2 path: 8
 * elements (float32, float16 through F16C, bfloat16 through shifts) or 4
 * (float64) per step, the
 * arithmetic of rope_run.c (the same bits), each cos/sin vector loaded
 * once for the PE_ROPE_LANES rows that share it, and large outputs written
 * with non-temporal stores.
 */
#include "pe.h"
#include "rope.h"
#include "simd.h"

#include "avx2.h"

#if PE_X86
/* (a, b) -> (a c - b s, b c + a s) on eight pairs held in two vectors.
 * The subtracting FMA passes a NaN of b s through as it is, as the
 * portable rotation does (it negates s, never a product). */
PE_INLINE void rot8(__m256 a, __m256 b, __m256 c, __m256 s, __m256 *ra, __m256 *rb)
{
    *ra = _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s));
    *rb = _mm256_fmadd_ps(b, c, _mm256_mul_ps(a, s));
}

/* Eight interleaved elements (four pairs) with cos/sin already duplicated
 * into pairs: fmaddsub subtracts in the even lanes and adds in the odd
 * ones, which is the rotation once the pairs are swapped for the second
 * product. */
PE_INLINE __m256 rot_inter8(__m256 v, __m256 cc, __m256 ss)
{
    __m256 sw = _mm256_permute_ps(v, 0xB1);
    return _mm256_fmaddsub_ps(v, cc, _mm256_mul_ps(sw, ss));
}

/* Four floats at p as (p0, p0, p1, p1, p2, p2, p3, p3). */
PE_INLINE __m256 dup4(const float *p)
{
    const __m256i idx = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(p)), idx);
}

/* Eight float16 or bfloat16 elements as floats. */
PE_INLINE __m256 load_h8(const uint16_t *p, const int dtype)
{
    return pe_ps_from_half8(_mm_loadu_si128((const __m128i *)p), dtype);
}

/* Eight floats of p and eight of p + 8 as their even and odd elements. */
PE_INLINE void split16(const float *p, __m256 *ev, __m256 *od)
{
    __m256 a = _mm256_loadu_ps(p), b = _mm256_loadu_ps(p + 8);
    /* in-lane shuffles leave 64-bit pieces out of order: 0, 2, 1, 3 */
    *ev = _mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
    *od = _mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
}

/* Sixteen floats held in lo, hi as their even and odd elements (split16
 * on registers). */
PE_INLINE void deinterleave8(__m256 lo, __m256 hi, __m256 *ev, __m256 *od)
{
    *ev = _mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xD8));
    *od = _mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xDD)), 0xD8));
}

/* Even elements ev and odd ones od as sixteen floats in order, lo then hi. */
PE_INLINE void interleave8(__m256 ev, __m256 od, __m256 *lo, __m256 *hi)
{
    __m256 l = _mm256_unpacklo_ps(ev, od), h = _mm256_unpackhi_ps(ev, od);
    *lo = _mm256_permute2f128_ps(l, h, 0x20);
    *hi = _mm256_permute2f128_ps(l, h, 0x31);
}

/* The same for doubles: eight in lo, hi as four even and four odd ones. */
PE_INLINE void deinterleave4(__m256d lo, __m256d hi, __m256d *ev, __m256d *od)
{
    *ev = _mm256_permute4x64_pd(_mm256_unpacklo_pd(lo, hi), 0xD8);
    *od = _mm256_permute4x64_pd(_mm256_unpackhi_pd(lo, hi), 0xD8);
}

PE_INLINE void interleave4(__m256d ev, __m256d od, __m256d *lo, __m256d *hi)
{
    __m256d l = _mm256_unpacklo_pd(ev, od), h = _mm256_unpackhi_pd(ev, od);
    *lo = _mm256_permute2f128_pd(l, h, 0x20);
    *hi = _mm256_permute2f128_pd(l, h, 0x31);
}

/* Eight pairs of a float32, float16 or bfloat16 row as their a and b
 * elements: at (i, half + i) if in_half, else at (2i, 2i + 1). */
PE_INLINE void load_pairs8(const char *xr, ptrdiff_t i, ptrdiff_t half, int in_half, __m256 *a,
                           __m256 *b, const int dtype)
{
    if (dtype == PE_F32) {
        const float *x = (const float *)xr;
        if (in_half) {
            *a = _mm256_loadu_ps(x + i), *b = _mm256_loadu_ps(x + half + i);
        } else {
            deinterleave8(_mm256_loadu_ps(x + 2 * i), _mm256_loadu_ps(x + 2 * i + 8), a, b);
        }
    } else {
        const uint16_t *x = (const uint16_t *)xr;
        if (in_half) {
            *a = load_h8(x + i, dtype), *b = load_h8(x + half + i, dtype);
        } else {
            deinterleave8(load_h8(x + 2 * i, dtype), load_h8(x + 2 * i + 8, dtype), a, b);
        }
    }
}

/* The rotated a and b of eight pairs stored at (i, half + i) if out_half,
 * else at (2i, 2i + 1). */
PE_INLINE void store_pairs8(char *orow, ptrdiff_t i, ptrdiff_t half, int out_half, __m256 ra,
                            __m256 rb, const int dtype, const int stream)
{
    __m256 lo = ra, hi = rb;
    ptrdiff_t p = i, q = half + i;
    if (!out_half)
        interleave8(ra, rb, &lo, &hi), p = 2 * i, q = 2 * i + 8;
    if (dtype == PE_F32) {
        pe_store_ps((float *)orow + p, lo, stream);
        pe_store_ps((float *)orow + q, hi, stream);
    } else {
        pe_store_h8((uint16_t *)orow + p, lo, dtype, stream);
        pe_store_h8((uint16_t *)orow + q, hi, dtype, stream);
    }
}

/* bfloat16 rows eight pairs a step from pair i on, read interleaved or as
 * two halves (`in_half`) and written interleaved or as two halves
 * (`out_half`).  Returns where the portable tail goes on. */
PE_INLINE ptrdiff_t rows_bf16x8(const char *x0, ptrdiff_t lxs, char *o0, ptrdiff_t los,
                                ptrdiff_t lanes, const float *c, const float *s, ptrdiff_t half,
                                ptrdiff_t i, const int in_half, const int out_half,
                                const int stream)
{
    for (; i + 8 <= half; i += 8) {
        __m256 cv = _mm256_loadu_ps(c + i), sv = _mm256_loadu_ps(s + i);
        for (ptrdiff_t g = 0; g < lanes; ++g) {
            const uint16_t *x = (const uint16_t *)(x0 + g * lxs);
            uint16_t *o = (uint16_t *)(o0 + g * los);
            __m256 a, b, ra, rb;
            if (in_half) {
                a = load_h8(x + i, PE_BF16), b = load_h8(x + half + i, PE_BF16);
            } else {
                pe_ps_from_bf16x16(_mm256_loadu_si256((const __m256i *)(x + 2 * i)), &a, &b);
            }
            rot8(a, b, cv, sv, &ra, &rb);
            if (out_half) {
                pe_store_h8(o + i, ra, PE_BF16, stream);
                pe_store_h8(o + half + i, rb, PE_BF16, stream);
            } else {
                pe_store_si256(o + 2 * i, pe_bf16x16_from_ps(ra, rb), stream);
            }
        }
    }
    return i;
}

/* The layout-changing rotations (DeepSeek-V3's interleaved-in, half-out,
 * and its inverse): eight pairs (four for float64) a step, the arithmetic
 * of the other layouts.  Returns where the portable tail goes on. */
PE_INLINE ptrdiff_t rows_relayout(const char *x0, ptrdiff_t lxs, char *o0, ptrdiff_t los,
                                  ptrdiff_t lanes, const char *t, ptrdiff_t half, const int layout,
                                  const int dtype, const int stream)
{
    const int in_half = layout == PE_ROPE_HALF_TO_INTERLEAVED;
    ptrdiff_t i = 0;
    if (dtype == PE_BF16) {
        /* sixteen interleaved bfloat16 are eight pairs' a and b as they
         * widen (pe_ps_from_bf16x16), and narrow back the same way */
        const float *c = (const float *)t, *s = c + half;
        /* half out: sixteen pairs a step, each half's sixteen results split
         * into even and odd ones to narrow sixteen at a time */
        for (; !in_half && i + 16 <= half; i += 16) {
            __m256 c0 = _mm256_loadu_ps(c + i), c1 = _mm256_loadu_ps(c + i + 8);
            __m256 s0 = _mm256_loadu_ps(s + i), s1 = _mm256_loadu_ps(s + i + 8);
            for (ptrdiff_t g = 0; g < lanes; ++g) {
                const uint16_t *x = (const uint16_t *)(x0 + g * lxs);
                uint16_t *o = (uint16_t *)(o0 + g * los);
                __m256 a0, b0, a1, b1, ra0, rb0, ra1, rb1, ev, od;
                pe_ps_from_bf16x16(_mm256_loadu_si256((const __m256i *)(x + 2 * i)), &a0, &b0);
                pe_ps_from_bf16x16(_mm256_loadu_si256((const __m256i *)(x + 2 * i + 16)), &a1, &b1);
                rot8(a0, b0, c0, s0, &ra0, &rb0);
                rot8(a1, b1, c1, s1, &ra1, &rb1);
                deinterleave8(ra0, ra1, &ev, &od);
                pe_store_si256(o + i, pe_bf16x16_from_ps(ev, od), stream);
                deinterleave8(rb0, rb1, &ev, &od);
                pe_store_si256(o + half + i, pe_bf16x16_from_ps(ev, od), stream);
            }
        }
        return rows_bf16x8(x0, lxs, o0, los, lanes, c, s, half, i, in_half, !in_half, stream);
    }
    if (dtype != PE_F64) {
        const float *c = (const float *)t, *s = c + half;
        for (; i + 8 <= half; i += 8) {
            __m256 cv = _mm256_loadu_ps(c + i), sv = _mm256_loadu_ps(s + i);
            for (ptrdiff_t g = 0; g < lanes; ++g) {
                __m256 a, b, ra, rb;
                load_pairs8(x0 + g * lxs, i, half, in_half, &a, &b, dtype);
                rot8(a, b, cv, sv, &ra, &rb);
                store_pairs8(o0 + g * los, i, half, !in_half, ra, rb, dtype, stream);
            }
        }
        return i;
    }
    const double *c = (const double *)t, *s = c + half;
    for (; i + 4 <= half; i += 4) {
        __m256d cv = _mm256_loadu_pd(c + i), sv = _mm256_loadu_pd(s + i);
        for (ptrdiff_t g = 0; g < lanes; ++g) {
            const double *x = (const double *)(x0 + g * lxs);
            double *o = (double *)(o0 + g * los);
            __m256d a, b;
            if (in_half)
                a = _mm256_loadu_pd(x + i), b = _mm256_loadu_pd(x + half + i);
            else
                deinterleave4(_mm256_loadu_pd(x + 2 * i), _mm256_loadu_pd(x + 2 * i + 4), &a, &b);
            __m256d ra = _mm256_fmsub_pd(a, cv, _mm256_mul_pd(b, sv));
            __m256d rb = _mm256_fmadd_pd(b, cv, _mm256_mul_pd(a, sv));
            if (in_half) {
                __m256d lo, hi;
                interleave4(ra, rb, &lo, &hi);
                pe_store_pd(o + 2 * i, lo, stream);
                pe_store_pd(o + 2 * i + 4, hi, stream);
            } else {
                pe_store_pd(o + i, ra, stream);
                pe_store_pd(o + half + i, rb, stream);
            }
        }
    }
    return i;
}

/* The first columns of bfloat16 rows sixteen at a time, as even and odd
 * elements (pe_ps_from_bf16x16): in the "half" layout cos and sin are split
 * to match, once for all the lanes; in the interleaved one the even
 * elements are the a of the pairs and the odd ones the b, which takes cos
 * and sin as they are (rows_bf16x8).  Returns where the other kernels of
 * rows_avx2 go on. */
PE_INLINE ptrdiff_t rows_bf16x16(const char *x0, ptrdiff_t lxs, char *o0, ptrdiff_t los,
                                 ptrdiff_t lanes, const float *c, const float *s, ptrdiff_t half,
                                 const int layout, const int stream)
{
    ptrdiff_t i = 0;
    if (layout == PE_ROPE_HALF) {
        for (; i + 16 <= half; i += 16) {
            __m256 ce, co, se, so;
            split16(c + i, &ce, &co);
            split16(s + i, &se, &so);
            for (ptrdiff_t g = 0; g < lanes; ++g) {
                const uint16_t *x = (const uint16_t *)(x0 + g * lxs);
                uint16_t *o = (uint16_t *)(o0 + g * los);
                __m256 ae, ao, be, bo, rae, rao, rbe, rbo;
                pe_ps_from_bf16x16(_mm256_loadu_si256((const __m256i *)(x + i)), &ae, &ao);
                pe_ps_from_bf16x16(_mm256_loadu_si256((const __m256i *)(x + half + i)), &be, &bo);
                rot8(ae, be, ce, se, &rae, &rbe);
                rot8(ao, bo, co, so, &rao, &rbo);
                pe_store_si256(o + i, pe_bf16x16_from_ps(rae, rao), stream);
                pe_store_si256(o + half + i, pe_bf16x16_from_ps(rbe, rbo), stream);
            }
        }
        return i;
    }
    return rows_bf16x8(x0, lxs, o0, los, lanes, c, s, half, 0, 0, 0, stream);
}

/* One row's cos/sin applied to the `lanes` rows that share it: each vector
 * of cos/sin is loaded (and, interleaved, duplicated) once for all of them. */
PE_INLINE void rows_avx2(const char *x0, ptrdiff_t lxs, char *o0, ptrdiff_t los, ptrdiff_t lanes,
                         const char *t, ptrdiff_t half, const int layout, const int dtype,
                         const int stream)
{
    ptrdiff_t i = 0;
    if (layout == PE_ROPE_INTERLEAVED_TO_HALF || layout == PE_ROPE_HALF_TO_INTERLEAVED) {
        i = rows_relayout(x0, lxs, o0, los, lanes, t, half, layout, dtype, stream);
        for (ptrdiff_t g = 0; g < lanes; ++g)
            pe_rope_rotate_row(x0 + g * lxs, o0 + g * los, t, half, i, layout, dtype);
        return;
    }
    if (dtype != PE_F64) {
        const float *c = (const float *)t, *s = c + half;
        if (dtype == PE_BF16)
            i = rows_bf16x16(x0, lxs, o0, los, lanes, c, s, half, layout, stream);
        if (layout == PE_ROPE_HALF) {
            for (; i + 8 <= half; i += 8) {
                __m256 cv = _mm256_loadu_ps(c + i), sv = _mm256_loadu_ps(s + i), ra, rb;
                for (ptrdiff_t g = 0; g < lanes; ++g) {
                    if (dtype == PE_F32) {
                        const float *x = (const float *)(x0 + g * lxs);
                        float *o = (float *)(o0 + g * los);
                        rot8(_mm256_loadu_ps(x + i), _mm256_loadu_ps(x + half + i), cv, sv, &ra,
                             &rb);
                        pe_store_ps(o + i, ra, stream);
                        pe_store_ps(o + half + i, rb, stream);
                    } else {
                        const uint16_t *x = (const uint16_t *)(x0 + g * lxs);
                        uint16_t *o = (uint16_t *)(o0 + g * los);
                        rot8(load_h8(x + i, dtype), load_h8(x + half + i, dtype), cv, sv, &ra, &rb);
                        pe_store_h8(o + i, ra, dtype, stream);
                        pe_store_h8(o + half + i, rb, dtype, stream);
                    }
                }
            }
        } else {
            for (; i + 4 <= half; i += 4) {
                __m256 cc = dup4(c + i), ss = dup4(s + i);
                for (ptrdiff_t g = 0; g < lanes; ++g) {
                    if (dtype == PE_F32) {
                        const float *x = (const float *)(x0 + g * lxs);
                        float *o = (float *)(o0 + g * los);
                        pe_store_ps(o + 2 * i, rot_inter8(_mm256_loadu_ps(x + 2 * i), cc, ss),
                                    stream);
                    } else {
                        const uint16_t *x = (const uint16_t *)(x0 + g * lxs);
                        uint16_t *o = (uint16_t *)(o0 + g * los);
                        pe_store_h8(o + 2 * i, rot_inter8(load_h8(x + 2 * i, dtype), cc, ss), dtype,
                                    stream);
                    }
                }
            }
        }
        for (ptrdiff_t g = 0; g < lanes; ++g)
            pe_rope_rotate_row(x0 + g * lxs, o0 + g * los, t, half, i, layout, dtype);
    } else {
        const double *c = (const double *)t, *s = c + half;
        if (layout == PE_ROPE_HALF) {
            for (; i + 4 <= half; i += 4) {
                __m256d cv = _mm256_loadu_pd(c + i), sv = _mm256_loadu_pd(s + i);
                for (ptrdiff_t g = 0; g < lanes; ++g) {
                    const double *x = (const double *)(x0 + g * lxs);
                    double *o = (double *)(o0 + g * los);
                    __m256d a = _mm256_loadu_pd(x + i), b = _mm256_loadu_pd(x + half + i);
                    pe_store_pd(o + i, _mm256_fmsub_pd(a, cv, _mm256_mul_pd(b, sv)), stream);
                    pe_store_pd(o + half + i, _mm256_fmadd_pd(b, cv, _mm256_mul_pd(a, sv)), stream);
                }
            }
        } else {
            for (; i + 2 <= half; i += 2) {
                __m256d cc =
                    _mm256_permute4x64_pd(_mm256_castpd128_pd256(_mm_loadu_pd(c + i)), 0x50);
                __m256d ss =
                    _mm256_permute4x64_pd(_mm256_castpd128_pd256(_mm_loadu_pd(s + i)), 0x50);
                for (ptrdiff_t g = 0; g < lanes; ++g) {
                    const double *x = (const double *)(x0 + g * lxs);
                    double *o = (double *)(o0 + g * los);
                    __m256d v = _mm256_loadu_pd(x + 2 * i);
                    __m256d sw = _mm256_permute_pd(v, 0x5);
                    pe_store_pd(o + 2 * i, _mm256_fmaddsub_pd(v, cc, _mm256_mul_pd(sw, ss)),
                                stream);
                }
            }
        }
        for (ptrdiff_t g = 0; g < lanes; ++g)
            pe_rope_rotate_row(x0 + g * lxs, o0 + g * los, t, half, i, layout, dtype);
    }
}

PE_INLINE void run_avx2_loop(const struct pe_rope_run *r, const int layout, const int dtype,
                             const int stream)
{
    for (ptrdiff_t m = 0; m < r->n; ++m) {
        const char *x = r->x + m * r->xs;
        char *o = r->o + m * r->os;
        rows_avx2(x, r->lxs, o, r->los, r->lanes, r->tab + m * r->ts, r->half, layout, dtype,
                  stream);
        for (ptrdiff_t g = 0; g < r->lanes; ++g)
            pe_rope_pass_through(x + g * r->lxs, o + g * r->los, r->half, r->dim, dtype);
    }
}

/* Lanes written straight to memory with non-temporal stores would fill
 * several partial cache lines at once, and the write-combining buffers
 * would flush them half empty.  So each row of all lanes is rotated into a
 * buffer in L1, then streamed out one lane after the other: every lane
 * leaves at most the one line shared with its next row open. */
PE_INLINE void run_avx2_bounced(const struct pe_rope_run *r, const int layout, const int dtype)
{
    ptrdiff_t rb = 2 * r->half * (ptrdiff_t)pe_itemsize(dtype);
    for (ptrdiff_t m = 0; m < r->n; ++m) {
        const char *x = r->x + m * r->xs;
        char *o = r->o + m * r->os;
        rows_avx2(x, r->lxs, r->bounce, rb, r->lanes, r->tab + m * r->ts, r->half, layout, dtype,
                  0);
        for (ptrdiff_t g = 0; g < r->lanes; ++g) {
            pe_stream_copy(o + g * r->los, r->bounce + g * rb, rb);
            pe_rope_pass_through(x + g * r->lxs, o + g * r->los, r->half, r->dim, dtype);
        }
    }
}

PE_INLINE void run_avx2(const struct pe_rope_run *r, const int layout, const int dtype)
{
    /* non-temporal stores need every vector store 16-byte aligned; the
     * bounced copy of whole rows needs rows of a multiple of 16 bytes */
    ptrdiff_t half_bytes = r->half * (ptrdiff_t)pe_itemsize(dtype);
    int stream = r->stream && r->x != r->o && (uintptr_t)r->o % 16 == 0 &&
                 (r->n == 1 || r->os % 16 == 0) && (r->lanes == 1 || r->los % 16 == 0) &&
                 (layout == PE_ROPE_INTERLEAVED || layout == PE_ROPE_HALF_TO_INTERLEAVED ||
                  half_bytes % 16 == 0);
    if (stream && r->lanes > 1 && half_bytes % 8 == 0) {
        run_avx2_bounced(r, layout, dtype);
        _mm_sfence();
    } else if (stream && r->lanes == 1) {
        run_avx2_loop(r, layout, dtype, 1);
        _mm_sfence();
    } else {
        run_avx2_loop(r, layout, dtype, 0);
    }
}

PE_SPECIALISE_ROPE(const pe_rope_run_fn, pe_rope_run_avx2, run_avx2, (const struct pe_rope_run *r),
                   (r));

PE_AVX2_END
#endif
