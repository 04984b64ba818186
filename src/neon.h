/*
 * neon.h -- the helpers of the NEON kernels (the *_neon.c files), as
 * avx2.h is for the AVX2 ones: float16 and bfloat16 four at a time, the
 * row primitive of simd.h (pe_row_add_vec), and sin/cos and their
 * rotation on two doubles (pe_sincos2, pe_rotate2).  Every helper does the
 * operations of its portable twin in the same order (FMA only where the
 * portable code writes fma()), so both paths give the same bits.
 *
 * Advanced SIMD and the float16 conversions (FCVTL, FCVTN) are part of
 * AArch64, so nothing is asked of the CPU at run time; PE_ARM compiles
 * these files out elsewhere.
 */
#ifndef PE_NEON_H
#define PE_NEON_H

#include "pe.h"
#include "simd.h"

#if PE_ARM
#include <arm_neon.h>

#include "sincos.h"

/* ---- float16 and bfloat16, four at a time ---- */

/* Four float16 as float32: FCVTL, except that a NaN keeps its bits as
 * half.h's pe_f32_from_f16 does (FCVTL makes a signalling NaN quiet). */
PE_INLINE float32x4_t pe_f32x4_from_f16(uint16x4_t h)
{
    float32x4_t f = vcvt_f32_f16(vreinterpret_f16_u16(h));
    uint32x4_t w = vmovl_u16(h);
    uint32x4_t nan = vcgtq_u32(vandq_u32(w, vdupq_n_u32(0x7fffu)), vdupq_n_u32(0x7c00u));
    uint32x4_t bits = vorrq_u32(
        vshlq_n_u32(vandq_u32(w, vdupq_n_u32(0x8000u)), 16),
        vorrq_u32(vdupq_n_u32(0x7f800000u), vshlq_n_u32(vandq_u32(w, vdupq_n_u32(0x3ffu)), 13)));
    return vbslq_f32(nan, vreinterpretq_f32_u32(bits), f);
}

/* Four float32 rounded to float16 (FCVTN: to nearest even, a NaN made
 * quiet with its sign and top payload bits, as pe_f16_from_f32). */
PE_INLINE uint16x4_t pe_f16x4_from_f32(float32x4_t f)
{
    return vreinterpret_u16_f16(vcvt_f16_f32(f));
}

/* Four bfloat16 as float32: a shift. */
PE_INLINE float32x4_t pe_f32x4_from_bf16(uint16x4_t h)
{
    return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
}

/* Four float32 rounded to bfloat16 as pe_bf16_from_f32: to nearest even
 * by adding 0x7fff and the lowest kept bit, a NaN made quiet instead. */
PE_INLINE uint16x4_t pe_bf16x4_from_f32(float32x4_t f)
{
    uint32x4_t x = vreinterpretq_u32_f32(f);
    uint32x4_t nan = vcgtq_u32(vandq_u32(x, vdupq_n_u32(0x7fffffffu)), vdupq_n_u32(0x7f800000u));
    uint32x4_t odd = vandq_u32(vshrq_n_u32(x, 16), vdupq_n_u32(1u));
    uint32x4_t r = vaddq_u32(x, vaddq_u32(vdupq_n_u32(0x7fffu), odd));
    uint16x4_t rounded = vshrn_n_u32(r, 16);
    uint16x4_t quiet = vorr_u16(vshrn_n_u32(x, 16), vdup_n_u16(0x40u));
    return vbsl_u16(vmovn_u32(nan), quiet, rounded);
}

/* Four 16-bit elements of dtype (PE_F16 or PE_BF16) as float32, and back
 * (pe_load16, pe_store16). */
PE_INLINE float32x4_t pe_load16x4(const uint16_t *p, const int dtype)
{
    uint16x4_t h = vld1_u16(p);
    return dtype == PE_BF16 ? pe_f32x4_from_bf16(h) : pe_f32x4_from_f16(h);
}

PE_INLINE uint16x4_t pe_round16x4(float32x4_t f, const int dtype)
{
    return dtype == PE_BF16 ? pe_bf16x4_from_f32(f) : pe_f16x4_from_f32(f);
}

PE_INLINE float32x4_t pe_widen16x4(uint16x4_t h, const int dtype)
{
    return dtype == PE_BF16 ? pe_f32x4_from_bf16(h) : pe_f32x4_from_f16(h);
}

PE_INLINE void pe_store16x4(uint16_t *p, float32x4_t f, const int dtype)
{
    vst1_u16(p, pe_round16x4(f, dtype));
}

/* ---- the row primitive ---- */

/* pe_row_add on the NEON path (pe_row_add_vec): two doubles, four floats or four 16-bit
 * scores at a time, each sum (or cast) as pe_row_add makes it, the rest by
 * pe_row_add. */
PE_INLINE void pe_row_add_vec(char *o, const char *x, ptrdiff_t n, const int kind, const int dtype)
{
    const ptrdiff_t isz = (ptrdiff_t)pe_itemsize(dtype);
    const ptrdiff_t xsz = kind == PE_ROW_SAME || dtype == PE_F64 ? isz : 4;
    ptrdiff_t j = 0;
    if (dtype == PE_F64) {
        double *d = (double *)o;
        const double *s = (const double *)x;
        for (; j + 2 <= n; j += 2) {
            float64x2_t v = vld1q_f64(s + j);
            vst1q_f64(d + j, kind == PE_ROW_CAST ? v : vaddq_f64(vld1q_f64(d + j), v));
        }
    } else if (dtype == PE_F32) {
        float *d = (float *)o;
        const float *s = (const float *)x;
        for (; j + 4 <= n; j += 4) {
            float32x4_t v = vld1q_f32(s + j);
            vst1q_f32(d + j, kind == PE_ROW_CAST ? v : vaddq_f32(vld1q_f32(d + j), v));
        }
    } else {
        uint16_t *d = (uint16_t *)o;
        for (; j + 4 <= n; j += 4) {
            float32x4_t v = kind == PE_ROW_SAME ? pe_load16x4((const uint16_t *)x + j, dtype)
                                                : vld1q_f32((const float *)x + j);
            if (kind == PE_ROW_CAST) {
                pe_store16x4(d + j, v, dtype);
                continue;
            }
            if (kind == PE_ROW_PRODUCT)
                v = pe_widen16x4(pe_round16x4(v, dtype), dtype);
            pe_store16x4(d + j, vaddq_f32(pe_load16x4(d + j, dtype), v), dtype);
        }
    }
    pe_row_add(o + j * isz, x + j * xsz, n - j, kind, dtype);
}

/* ---- sin and cos on two doubles (sincos.h) ---- */

/* s[l], c[l] = sin, cos of pos * freq[l], l < 2: pe_sincos1 on two
 * angles, the same reduction and polynomials lane by lane; an angle past
 * PE_REDUCE_MAX (or not finite) goes to pe_sincos1, that is to the C
 * library, as on the portable path. */
PE_INLINE void pe_sincos2(double pos, const double *freq, double *s, double *c)
{
    float64x2_t x = vmulq_f64(vdupq_n_f64(pos), vld1q_f64(freq));
    float64x2_t n = vrndnq_f64(vmulq_f64(x, vdupq_n_f64(PE_2_OVER_PI)));
    float64x2_t nn = vnegq_f64(n);
    float64x2_t r = vfmaq_f64(x, nn, vdupq_n_f64(PE_PIO2_1));
    r = vfmaq_f64(r, nn, vdupq_n_f64(PE_PIO2_2));
    r = vfmaq_f64(r, nn, vdupq_n_f64(PE_PIO2_3));

    float64x2_t z = vmulq_f64(r, r);
    float64x2_t ps = vfmaq_f64(vdupq_n_f64(PE_S5), z, vdupq_n_f64(PE_S6));
    ps = vfmaq_f64(vdupq_n_f64(PE_S4), z, ps);
    ps = vfmaq_f64(vdupq_n_f64(PE_S3), z, ps);
    ps = vfmaq_f64(vdupq_n_f64(PE_S2), z, ps);
    ps = vfmaq_f64(vdupq_n_f64(PE_S1), z, ps);
    float64x2_t sr = vfmaq_f64(r, vmulq_f64(r, z), ps);
    float64x2_t pc = vfmaq_f64(vdupq_n_f64(PE_C5), z, vdupq_n_f64(PE_C6));
    pc = vfmaq_f64(vdupq_n_f64(PE_C4), z, pc);
    pc = vfmaq_f64(vdupq_n_f64(PE_C3), z, pc);
    pc = vfmaq_f64(vdupq_n_f64(PE_C2), z, pc);
    pc = vfmaq_f64(vdupq_n_f64(PE_C1), z, pc);
    pc = vmulq_f64(vmulq_f64(z, z), pc);
    const float64x2_t one = vdupq_n_f64(1.0);
    float64x2_t hz = vmulq_f64(vdupq_n_f64(0.5), z), w = vsubq_f64(one, hz);
    float64x2_t cr = vaddq_f64(w, vaddq_f64(vsubq_f64(vsubq_f64(one, w), hz), pc));

    /* quadrant from the low two bits of n */
    uint64x2_t q = vreinterpretq_u64_f64(vaddq_f64(n, vdupq_n_f64(PE_ROUND_MAGIC)));
    uint64x2_t odd = vceqq_u64(vandq_u64(q, vdupq_n_u64(1u)), vdupq_n_u64(1u));
    uint64x2_t sneg = vceqq_u64(vandq_u64(q, vdupq_n_u64(2u)), vdupq_n_u64(2u));
    uint64x2_t q1 = vaddq_u64(q, vdupq_n_u64(1u));
    uint64x2_t cneg = vceqq_u64(vandq_u64(q1, vdupq_n_u64(2u)), vdupq_n_u64(2u));
    float64x2_t sv = vbslq_f64(odd, cr, sr), cv = vbslq_f64(odd, sr, cr);
    vst1q_f64(s, vbslq_f64(sneg, vnegq_f64(sv), sv));
    vst1q_f64(c, vbslq_f64(cneg, vnegq_f64(cv), cv));

    /* the lanes the reduction does not cover: as the portable path */
    uint64x2_t small = vcltq_f64(vabsq_f64(x), vdupq_n_f64(PE_REDUCE_MAX));
    if (vminvq_u32(vreinterpretq_u32_u64(small)) == 0)
        for (int l = 0; l < 2; ++l)
            if (!(fabs(pos * freq[l]) < PE_REDUCE_MAX))
                pe_sincos1(pos * freq[l], &s[l], &c[l]);
}

/* pe_rotate1 on two columns: one product and one FMA each, a value below
 * the floor recomputed from its angle (pe_sincos1, as the portable path). */
PE_INLINE void pe_rotate2(double *s, double *c, float64x2_t sd, float64x2_t cd, float64x2_t w,
                          double m, double pos)
{
    float64x2_t s0 = vld1q_f64(s), c0 = vld1q_f64(c);
    float64x2_t floor = vaddq_f64(vmulq_f64(vdupq_n_f64(m), w), vdupq_n_f64(0x1p-20));
    float64x2_t s1 = vfmaq_f64(vmulq_f64(c0, sd), s0, cd);
    float64x2_t c1 = vfmaq_f64(vnegq_f64(vmulq_f64(s0, sd)), c0, cd);
    uint64x2_t ok = vandq_u64(vcgeq_f64(vabsq_f64(s1), floor), vcgeq_f64(vabsq_f64(c1), floor));
    vst1q_f64(s, s1);
    vst1q_f64(c, c1);
    if (vminvq_u32(vreinterpretq_u32_u64(ok)) == 0) {
        double ws[2];
        vst1q_f64(ws, w);
        for (int l = 0; l < 2; ++l)
            if (fabs(s[l]) < ws[l] * m + 0x1p-20 || fabs(c[l]) < ws[l] * m + 0x1p-20)
                pe_sincos1(pos * ws[l], &s[l], &c[l]);
    }
}

#endif /* PE_ARM */

#endif
