/*
 * cope_avx2.c -- CoPE's position logits into attention scores (cope.h),
 * the AVX2 kernel: the rows of cope.c, their runs of one value added into
 * float32 and float64 scores four at a time (each sum in float64, rounded
 * once: the same bits as the portable run).
 */
#include "cope.h"

#include "pe.h"
#include "simd.h"

#include "avx2.h"

#if PE_X86
/* o[j] = v or o[j] + v rounded once, j < n, as pe_cope_run. */
PE_INLINE void run_avx2(char *o, ptrdiff_t n, double v, const int add, const int dtype)
{
    ptrdiff_t j = 0;
    const __m256d vv = _mm256_set1_pd(v);
    if (add && dtype == PE_F64) {
        double *d = (double *)o;
        for (; j + 4 <= n; j += 4)
            _mm256_storeu_pd(d + j, _mm256_add_pd(_mm256_loadu_pd(d + j), vv));
    } else if (add && dtype == PE_F32) {
        float *d = (float *)o;
        for (; j + 8 <= n; j += 8) {
            __m256 x = _mm256_loadu_ps(d + j);
            __m256d lo = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x)), vv);
            __m256d hi = _mm256_add_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)), vv);
            _mm256_storeu_ps(d + j, _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo)));
        }
    }
    pe_cope_run(o + j * (ptrdiff_t)pe_itemsize(dtype), n - j, v, add, dtype);
}

/* Logits (or gates) j0 to j0 + 3 of a row, as float64. */
PE_INLINE __m256d logits4(const char *l, ptrdiff_t j0, int dtype)
{
    if (dtype == PE_F32)
        return _mm256_cvtps_pd(_mm_loadu_ps((const float *)l + j0));
    return _mm256_loadu_pd((const double *)l + j0);
}

/* pe_cope_exp of four x <= 0, op for op. */
PE_INLINE __m256d exp4(__m256d x)
{
    const __m256d shift = _mm256_set1_pd(PE_COPE_EXP_SHIFT);
    x = _mm256_max_pd(_mm256_set1_pd(-746.0), x); /* a nan stays, as x < -746 ? -746 : x */
    const __m256d k = _mm256_sub_pd(
        _mm256_add_pd(_mm256_mul_pd(x, _mm256_set1_pd(PE_COPE_INV_LN2)), shift), shift);
    const __m256d r =
        _mm256_sub_pd(_mm256_sub_pd(x, _mm256_mul_pd(k, _mm256_set1_pd(PE_COPE_LN2_HI))),
                      _mm256_mul_pd(k, _mm256_set1_pd(PE_COPE_LN2_LO)));
    __m256d q = _mm256_set1_pd(pe_cope_exp_c[11]);
    for (int n = 10; n >= 0; --n)
        q = _mm256_add_pd(_mm256_set1_pd(pe_cope_exp_c[n]), _mm256_mul_pd(r, q));
    const __m256d one = _mm256_set1_pd(1.0);
    const __m256d hi = _mm256_add_pd(one, r), lo = _mm256_add_pd(_mm256_sub_pd(one, hi), r);
    const __m256d e = _mm256_add_pd(hi, _mm256_add_pd(lo, _mm256_mul_pd(_mm256_mul_pd(r, r), q)));
    const __m256d k1 = _mm256_floor_pd(_mm256_mul_pd(k, _mm256_set1_pd(0.5)));
    const __m256d k2 = _mm256_sub_pd(k, k1);
    const __m256d bias = _mm256_set1_pd(PE_COPE_EXP_SHIFT + 1023.0);
    const __m256d p1 =
        _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_castpd_si256(_mm256_add_pd(k1, bias)), 52));
    const __m256d p2 =
        _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_castpd_si256(_mm256_add_pd(k2, bias)), 52));
    return _mm256_mul_pd(_mm256_mul_pd(e, p1), p2);
}

/* pe_cope_gate of four logits. */
PE_INLINE __m256d gates4(__m256d a)
{
    const __m256d sign = _mm256_set1_pd(-0.0), one = _mm256_set1_pd(1.0);
    const __m256d ev = exp4(_mm256_or_pd(a, sign)); /* -|a| */
    const __m256d ge = _mm256_cmp_pd(a, _mm256_setzero_pd(), _CMP_GE_OQ);
    return _mm256_div_pd(_mm256_blendv_pd(ev, one, ge), _mm256_add_pd(one, ev));
}

/* pe_cope_value at four positions 0 <= p < npos - 1 (z in L1): z[floor(p)]
 * and the next value loaded as a pair per lane (a gather is slower), the
 * next one z[ceil(p)] unless p is an integer, when ceil(p) = floor(p). */
PE_INLINE __m256d values4(const double *z, __m256d p)
{
    const __m256d lo = _mm256_round_pd(p, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const __m256d w = _mm256_sub_pd(p, lo);
    int32_t at[4];
    _mm_storeu_si128((__m128i *)at, _mm256_cvttpd_epi32(lo));
    const __m256d t0 = _mm256_set_m128d(_mm_loadu_pd(z + at[2]), _mm_loadu_pd(z + at[0]));
    const __m256d t1 = _mm256_set_m128d(_mm_loadu_pd(z + at[3]), _mm_loadu_pd(z + at[1]));
    const __m256d zlo = _mm256_unpacklo_pd(t0, t1), next = _mm256_unpackhi_pd(t0, t1);
    const __m256d zhi = _mm256_blendv_pd(next, zlo, _mm256_cmp_pd(p, lo, _CMP_EQ_OQ));
    const __m256d b = _mm256_mul_pd(zlo, _mm256_sub_pd(_mm256_set1_pd(1.0), w));
    return _mm256_add_pd(_mm256_mul_pd(zhi, w), b);
}

/* The keys of a row four at a time (pe_cope_keys_fn), float32 or float64
 * logits (or float64 gates) into float32 or float64 scores; the rest by
 * the portable loop. */
PE_INLINE ptrdiff_t keys_avx2(const struct pe_cope *c, const char *l, char *o, const double *z,
                              ptrdiff_t j, double *sum, const int add, const int dtype)
{
    const int ldt = c->logits.dtype;
    if ((dtype != PE_F32 && dtype != PE_F64) || (ldt != PE_F32 && ldt != PE_F64))
        return j;
    const double top = (double)(c->npos - 1);
    double s = *sum;
    for (; j >= 3; j -= 4) {
        const ptrdiff_t j0 = j - 3;
        const __m256d a = logits4(l, j0, ldt);
        /* the positions summed one at a time in registers (through memory,
         * the vector's load would wait for the four stores) */
        const __m256d g = c->gates ? a : gates4(a);
        const __m128d g01 = _mm256_castpd256_pd128(g), g23 = _mm256_extractf128_pd(g, 1);
        const double p3 = s + _mm_cvtsd_f64(_mm_unpackhi_pd(g23, g23));
        const double p2 = p3 + _mm_cvtsd_f64(g23);
        const double p1 = p2 + _mm_cvtsd_f64(_mm_unpackhi_pd(g01, g01));
        const double p0 = p1 + _mm_cvtsd_f64(g01);
        if (p0 >= top) /* the gates are >= 0: p0 is the largest */
            break;
        s = p0;
        const __m256d v = values4(z, _mm256_set_pd(p3, p2, p1, p0));
        if (dtype == PE_F64) {
            double *d = (double *)o + j0;
            _mm256_storeu_pd(d, add ? _mm256_add_pd(_mm256_loadu_pd(d), v) : v);
        } else {
            float *d = (float *)o + j0;
            const __m256d x = add ? _mm256_add_pd(_mm256_cvtps_pd(_mm_loadu_ps(d)), v) : v;
            _mm_storeu_ps(d, _mm256_cvtpd_ps(x));
        }
    }
    *sum = s;
    return j;
}

PE_COPE_ROWS_TABLE(pe_cope_rows_avx2, run_avx2, keys_avx2);

/* pe_cope_sig_run four logits at a time (float32 or float64; the rest
 * and other dtypes by it), op for op. */
static void sig_avx2(const char *l, int dtype, ptrdiff_t n, double *sig, double *sneg)
{
    ptrdiff_t j = 0;
    if (dtype == PE_F32 || dtype == PE_F64) {
        const __m256d sign = _mm256_set1_pd(-0.0), one = _mm256_set1_pd(1.0);
        const __m256d zero = _mm256_setzero_pd();
        for (; j + 4 <= n; j += 4) {
            const __m256d a = logits4(l, j, dtype);
            const __m256d ev = exp4(_mm256_or_pd(a, sign)); /* e^-|a| */
            const __m256d den = _mm256_add_pd(one, ev);
            const __m256d ge = _mm256_cmp_pd(a, zero, _CMP_GE_OQ); /* a >= 0 */
            const __m256d le = _mm256_cmp_pd(a, zero, _CMP_LE_OQ); /* -a >= 0 */
            _mm256_storeu_pd(sig + j, _mm256_div_pd(_mm256_blendv_pd(ev, one, ge), den));
            _mm256_storeu_pd(sneg + j, _mm256_div_pd(_mm256_blendv_pd(ev, one, le), den));
        }
    }
    pe_cope_sig_run(l, dtype, j, n, sig, sneg);
}

/* pe_cope_grad_row with the gates four at a time (and floor and ceil one
 * instruction each). */
void pe_cope_grad_row_avx2(const struct pe_cope_grad *c, ptrdiff_t r, double *scratch)
{
    pe_cope_grad_row(c, r, scratch, sig_avx2, pe_cope_z_avx2);
}

/* pe_cope_grad_table, its sums over the head dim four at a time (the
 * compiler's vectors: each element's sum in its order). */
void pe_cope_grad_table_avx2(const struct pe_cope_grad *c, ptrdiff_t p0, ptrdiff_t p1)
{
    pe_cope_grad_table(c, p0, p1);
}

/* pe_cope_z_rows with sixteen positions of a row summed in registers over
 * the whole head dim (then four, then one at a time): the same operations
 * for each position, in the same order, whatever the count. */
void pe_cope_z_avx2(const double *q, const double *et, ptrdiff_t d, ptrdiff_t npos, ptrdiff_t count,
                    double *z, ptrdiff_t r0, ptrdiff_t r1)
{
    for (ptrdiff_t r = r0; r < r1; ++r) {
        const double *qr = q + r * d;
        double *zr = z + r * npos;
        ptrdiff_t p = 0;
        for (; p + 16 <= count; p += 16) {
            __m256d a = _mm256_set1_pd(qr[0]);
            __m256d s0 = _mm256_mul_pd(a, _mm256_loadu_pd(et + p));
            __m256d s1 = _mm256_mul_pd(a, _mm256_loadu_pd(et + p + 4));
            __m256d s2 = _mm256_mul_pd(a, _mm256_loadu_pd(et + p + 8));
            __m256d s3 = _mm256_mul_pd(a, _mm256_loadu_pd(et + p + 12));
            for (ptrdiff_t k = 1; k < d; ++k) {
                const double *e = et + k * npos + p;
                a = _mm256_set1_pd(qr[k]);
                s0 = _mm256_add_pd(s0, _mm256_mul_pd(a, _mm256_loadu_pd(e)));
                s1 = _mm256_add_pd(s1, _mm256_mul_pd(a, _mm256_loadu_pd(e + 4)));
                s2 = _mm256_add_pd(s2, _mm256_mul_pd(a, _mm256_loadu_pd(e + 8)));
                s3 = _mm256_add_pd(s3, _mm256_mul_pd(a, _mm256_loadu_pd(e + 12)));
            }
            _mm256_storeu_pd(zr + p, s0);
            _mm256_storeu_pd(zr + p + 4, s1);
            _mm256_storeu_pd(zr + p + 8, s2);
            _mm256_storeu_pd(zr + p + 12, s3);
        }
        for (; p + 4 <= count; p += 4) {
            __m256d s = _mm256_mul_pd(_mm256_set1_pd(qr[0]), _mm256_loadu_pd(et + p));
            for (ptrdiff_t k = 1; k < d; ++k)
                s = _mm256_add_pd(
                    s, _mm256_mul_pd(_mm256_set1_pd(qr[k]), _mm256_loadu_pd(et + k * npos + p)));
            _mm256_storeu_pd(zr + p, s);
        }
        for (; p < count; ++p) {
            double s = qr[0] * et[p];
            for (ptrdiff_t k = 1; k < d; ++k)
                s = s + qr[k] * et[k * npos + p];
            zr[p] = s;
        }
    }
}

PE_AVX2_END
#endif
