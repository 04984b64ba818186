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

/* The rotation (s, c) -> (s cd + c sd, c cd - s sd): two products and a sum
 * each, rounded in that order on both paths; values that come out below
 * the floor are recomputed from the angle pos * freq[i]. */
static void rotate_row_scalar(double *s, double *c, const double *sd, const double *cd,
                              const double *freq, double pos, double m, ptrdiff_t i, ptrdiff_t n)
{
    for (; i < n; ++i) {
        double s0 = s[i], c0 = c[i], floor = m * freq[i] + 0x1p-20;
        double s1 = s0 * cd[i] + c0 * sd[i], c1 = c0 * cd[i] - s0 * sd[i];
        if (fabs(s1) < floor || fabs(c1) < floor)
            pe_sincos1(pos * freq[i], &s1, &c1);
        s[i] = s1;
        c[i] = c1;
    }
}

#if PE_X86
PE_TARGET_AVX2 static void rotate_row_avx2(double *s, double *c, const double *sd, const double *cd,
                                           const double *freq, double pos, double m, ptrdiff_t n)
{
    const __m256d vm = _mm256_set1_pd(m), tiny = _mm256_set1_pd(0x1p-20);
    const __m256d neg = _mm256_set1_pd(-0.0), vpos = _mm256_set1_pd(pos);
    ptrdiff_t i = 0;
    for (; i + 4 <= n; i += 4) {
        __m256d s0 = _mm256_loadu_pd(s + i), c0 = _mm256_loadu_pd(c + i);
        __m256d vsd = _mm256_loadu_pd(sd + i), vcd = _mm256_loadu_pd(cd + i);
        __m256d w = _mm256_loadu_pd(freq + i);
        __m256d floor = _mm256_add_pd(_mm256_mul_pd(vm, w), tiny);
        __m256d s1 = _mm256_add_pd(_mm256_mul_pd(s0, vcd), _mm256_mul_pd(c0, vsd));
        __m256d c1 = _mm256_sub_pd(_mm256_mul_pd(c0, vcd), _mm256_mul_pd(s0, vsd));
        __m256d low = _mm256_or_pd(_mm256_cmp_pd(_mm256_andnot_pd(neg, s1), floor, _CMP_LT_OQ),
                                   _mm256_cmp_pd(_mm256_andnot_pd(neg, c1), floor, _CMP_LT_OQ));
        if (_mm256_movemask_pd(low)) { /* as the scalar path: those lanes directly */
            __m256d se, ce;
            pe_sincos4(_mm256_mul_pd(vpos, w), &se, &ce);
            s1 = _mm256_blendv_pd(s1, se, low);
            c1 = _mm256_blendv_pd(c1, ce, low);
        }
        _mm256_storeu_pd(s + i, s1);
        _mm256_storeu_pd(c + i, c1);
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

void pe_sincos_group(struct pe_rotor *rt, const char *pos, ptrdiff_t stride, ptrdiff_t n,
                     const double *freq, ptrdiff_t half, double wmax, int rotate, pe_row_fn emit,
                     void *ctx)
{
    double step = 0.0, m = 0.0;
    rotate = rotate && n > 2 && pe_progression(pos, stride, n, &step);
    if (rotate) {
        /* the largest |position| of a progression is at one of its ends */
        double a = fabs(*(const double *)pos), b = fabs(*(const double *)(pos + (n - 1) * stride));
        m = (a > b ? a : b) * 0x1p-26;
        rotate = m * wmax <= PE_ROTATE_MAX; /* false for an infinite or NaN product */
    }
    if (rotate && !(step == rt->step)) {
        pe_sincos_row(step, freq, half, rt->sd, rt->cd);
        rt->step = step;
    }
    for (ptrdiff_t j = 0; j < n; ++j) {
        double p = *(const double *)(pos + j * stride);
        if (!rotate || j == 0)
            pe_sincos_row(p, freq, half, rt->s, rt->c);
        else
            pe_sincos_rotate_row(rt->s, rt->c, rt->sd, rt->cd, freq, p, m, half);
        emit(ctx, j, rt->s, rt->c);
    }
}
