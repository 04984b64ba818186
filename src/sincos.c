/*
 * sincos.c -- rows of sin and cos of pos * freq[i] in float64, and their
 * rotation from one row to the next.
 *
 * Every table posenc writes (sinusoid, RoPE cos/sin) is a row of sin and cos
 * of the same angles.  One range reduction serves both, and a vector of four
 * doubles does four angles per step, so the tables are bound by the stores,
 * not by the C library's scalar sin() and cos().  The arithmetic is in
 * sincos.h.  Evenly spaced positions take the cheaper route of
 * pe_sincos_group: one row in PE_ANCHOR directly, the others rotated from
 * it, the one primitive both sinusoid.c and rope.c build their tables on.
 */
#include "pe.h"
#include "sincos.h"

static void sincos_row_scalar(double pos, const double *freq, ptrdiff_t n, double *s, double *c)
{
    for (ptrdiff_t i = 0; i < n; ++i)
        pe_sincos1(pos * freq[i], &s[i], &c[i]);
}

#if PE_X86
PE_TARGET_AVX2 static void sincos_row_avx2(double pos, const double *freq, ptrdiff_t n, double *s,
                                           double *c)
{
    const __m256d vpos = _mm256_set1_pd(pos);
    ptrdiff_t i = 0;
    for (; i + 4 <= n; i += 4) {
        __m256d vs, vc;
        pe_sincos4(_mm256_mul_pd(vpos, _mm256_loadu_pd(freq + i)), &vs, &vc);
        _mm256_storeu_pd(s + i, vs);
        _mm256_storeu_pd(c + i, vc);
    }
    sincos_row_scalar(pos, freq + i, n - i, s + i, c + i);
}
#endif

void pe_sincos_row(double pos, const double *freq, ptrdiff_t n, double *s, double *c)
{
#if PE_X86
    if (pe_use_avx2()) {
        sincos_row_avx2(pos, freq, n, s, c);
        return;
    }
#endif
    sincos_row_scalar(pos, freq, n, s, c);
}

static void rotate_row_scalar(double *s, double *c, const double *sd, const double *cd,
                              const double *freq, double pos, double m, ptrdiff_t i, ptrdiff_t n)
{
    for (; i < n; ++i)
        pe_rotate1(&s[i], &c[i], sd[i], cd[i], freq[i], m, pos);
}

#if PE_X86
PE_TARGET_AVX2 static void rotate_row_avx2(double *s, double *c, const double *sd, const double *cd,
                                           const double *freq, double pos, double m, ptrdiff_t n)
{
    const __m256d vm = _mm256_set1_pd(m), vpos = _mm256_set1_pd(pos);
    ptrdiff_t i = 0;
    for (; i + 4 <= n; i += 4) {
        __m256d vs = _mm256_loadu_pd(s + i), vc = _mm256_loadu_pd(c + i);
        pe_rotate4(&vs, &vc, _mm256_loadu_pd(sd + i), _mm256_loadu_pd(cd + i),
                   _mm256_loadu_pd(freq + i), vm, vpos);
        _mm256_storeu_pd(s + i, vs);
        _mm256_storeu_pd(c + i, vc);
    }
    rotate_row_scalar(s, c, sd, cd, freq, pos, m, i, n);
}
#endif

void pe_sincos_rotate_row(double *s, double *c, const double *sd, const double *cd,
                          const double *freq, double pos, double m, ptrdiff_t n)
{
#if PE_X86
    if (pe_use_avx2()) {
        rotate_row_avx2(s, c, sd, cd, freq, pos, m, n);
        return;
    }
#endif
    rotate_row_scalar(s, c, sd, cd, freq, pos, m, 0, n);
}

int pe_group_rotates(struct pe_rotor *rt, const char *pos, ptrdiff_t stride, ptrdiff_t n,
                     const double *freq, ptrdiff_t half, double wmax, int rotate, double *m)
{
    double step = 0.0;
    rotate = rotate && n > 2 && pe_progression(pos, stride, n, &step);
    if (rotate) {
        /* the largest |position| of a progression is at one of its ends */
        double a = fabs(*(const double *)pos), b = fabs(*(const double *)(pos + (n - 1) * stride));
        *m = (a > b ? a : b) * 0x1p-26;
        rotate = *m * wmax <= PE_ROTATE_MAX; /* false for an infinite or NaN product */
    }
    if (rotate && !(step == rt->step)) {
        pe_sincos_row(step, freq, half, rt->sd, rt->cd);
        rt->step = step;
    }
    return rotate;
}

void pe_sincos_group(struct pe_rotor *rt, const char *pos, ptrdiff_t stride, ptrdiff_t n,
                     const double *freq, ptrdiff_t half, double wmax, int rotate, pe_row_fn emit,
                     void *ctx)
{
    double m = 0.0;
    rotate = pe_group_rotates(rt, pos, stride, n, freq, half, wmax, rotate, &m);
    for (ptrdiff_t j = 0; j < n; ++j) {
        double p = *(const double *)(pos + j * stride);
        if (!rotate || j == 0)
            pe_sincos_row(p, freq, half, rt->s, rt->c);
        else
            pe_sincos_rotate_row(rt->s, rt->c, rt->sd, rt->cd, freq, p, m, half);
        emit(ctx, j, rt->s, rt->c);
    }
}

#if PE_X86
PE_TARGET_AVX2 void pe_stream_copy(char *dst, const char *src, ptrdiff_t bytes)
{
    ptrdiff_t k = 0;
    for (; k + 32 <= bytes; k += 32) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(src + k));
        _mm_stream_si128((__m128i *)(dst + k), _mm256_castsi256_si128(v));
        _mm_stream_si128((__m128i *)(dst + k + 16), _mm256_extracti128_si256(v, 1));
    }
    for (; k < bytes; k += 16)
        _mm_stream_si128((__m128i *)(dst + k), _mm_loadu_si128((const __m128i *)(src + k)));
}

PE_TARGET_AVX2 void pe_stream_fence(void)
{
    _mm_sfence();
}
#endif
