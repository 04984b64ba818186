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

PE_COPE_ROWS_TABLE(pe_cope_rows_avx2, run_avx2);

PE_AVX2_END
#endif
