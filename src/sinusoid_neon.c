/*
 * sinusoid_neon.c -- the cells of sinusoid.c on the NEON path: four columns
 * of sin and cos per step (two pairs of doubles, pe_sincos2 and pe_rotate2),
 * rotated and stored in the same pass, rounded as the portable cells round
 * them (the same bits).  float64 -> float16 and bfloat16 go through FCVTXN,
 * float64 -> float32 rounded to odd as half.h's pe_f32_round_odd, then to
 * nearest even: no rare case for the portable conversion.
 */
#include "pe.h"
#include "simd.h"
#include "sincos.h"
#include "sinusoid.h"

#include "neon.h"

#if PE_ARM
/* Columns j .. j + 3 of a row (sin in s0, s1, cos in c0, c1), as
 * pe_sinusoid_store1 stores each. */
PE_INLINE void store4(char *row, ptrdiff_t j, ptrdiff_t half, const int layout, const int dtype,
                      float64x2_t s0, float64x2_t s1, float64x2_t c0, float64x2_t c1)
{
    if (dtype == PE_F64) {
        double *o = (double *)row;
        if (layout == PE_INTERLEAVED) {
            float64x2x2_t a = {{s0, c0}}, b = {{s1, c1}};
            vst2q_f64(o + 2 * j, a);
            vst2q_f64(o + 2 * j + 4, b);
        } else {
            vst1q_f64(o + j, s0), vst1q_f64(o + j + 2, s1);
            vst1q_f64(o + half + j, c0), vst1q_f64(o + half + j + 2, c1);
        }
        return;
    }
    float32x4_t fs, fc;
    if (dtype == PE_F32) {
        fs = vcombine_f32(vcvt_f32_f64(s0), vcvt_f32_f64(s1));
        fc = vcombine_f32(vcvt_f32_f64(c0), vcvt_f32_f64(c1));
        float *o = (float *)row;
        if (layout == PE_INTERLEAVED) {
            float32x4x2_t v = {{fs, fc}};
            vst2q_f32(o + 2 * j, v);
        } else {
            vst1q_f32(o + j, fs), vst1q_f32(o + half + j, fc);
        }
        return;
    }
    fs = vcombine_f32(vcvtx_f32_f64(s0), vcvtx_f32_f64(s1));
    fc = vcombine_f32(vcvtx_f32_f64(c0), vcvtx_f32_f64(c1));
    uint16x4x2_t h = {{pe_round16x4(fs, dtype), pe_round16x4(fc, dtype)}};
    uint16_t *o = (uint16_t *)row;
    if (layout == PE_INTERLEAVED)
        vst2_u16(o + 2 * j, h);
    else
        vst1_u16(o + j, h.val[0]), vst1_u16(o + half + j, h.val[1]);
}

/* The cell of sinusoid.c's cell_scalar, four columns per step. */
PE_INLINE void cell_neon(struct pe_rotor *rt, const double *pos, ptrdiff_t r0, ptrdiff_t n,
                         const double *freq, ptrdiff_t half, double wmax, char *out,
                         ptrdiff_t row_stride, const int layout, const int dtype)
{
    double m = 0.0;
    int rotate = pe_group_rotates(pe_sincos_row_neon, rt, (const char *)(pos + r0), sizeof *pos, n,
                                  freq, half, wmax, dtype != PE_F64, &m);
    double *s = rt->s, *c = rt->c;
    for (ptrdiff_t r = 0; r < n; ++r) {
        double p = pos[r0 + r];
        char *row = out + (r0 + r) * row_stride;
        ptrdiff_t j = 0;
        if (!rotate || r == 0) {
            const float64x2_t vpos = vdupq_n_f64(p);
            for (; j + 4 <= half; j += 4) {
                float64x2_t s0, c0, s1, c1;
                pe_sincos2(vmulq_f64(vpos, vld1q_f64(freq + j)), &s0, &c0);
                pe_sincos2(vmulq_f64(vpos, vld1q_f64(freq + j + 2)), &s1, &c1);
                vst1q_f64(s + j, s0), vst1q_f64(s + j + 2, s1);
                vst1q_f64(c + j, c0), vst1q_f64(c + j + 2, c1);
                store4(row, j, half, layout, dtype, s0, s1, c0, c1);
            }
            for (; j < half; ++j) {
                pe_sincos1(p * freq[j], &s[j], &c[j]);
                pe_sinusoid_store1(row, j, half, layout, dtype, s[j], c[j]);
            }
            continue;
        }
        for (; j + 4 <= half; j += 4) {
            pe_rotate2(s + j, c + j, vld1q_f64(rt->sd + j), vld1q_f64(rt->cd + j),
                       vld1q_f64(freq + j), m, p);
            pe_rotate2(s + j + 2, c + j + 2, vld1q_f64(rt->sd + j + 2), vld1q_f64(rt->cd + j + 2),
                       vld1q_f64(freq + j + 2), m, p);
            store4(row, j, half, layout, dtype, vld1q_f64(s + j), vld1q_f64(s + j + 2),
                   vld1q_f64(c + j), vld1q_f64(c + j + 2));
        }
        pe_sinusoid_rotate_tail(row, j, half, s, c, rt->sd, rt->cd, freq, m, p, layout, dtype);
    }
}

PE_SPECIALISE(const pe_sinusoid_cell_fn, pe_sinusoid_cell_neon, cell_neon, PE_SINUSOID_CELL_PARAMS,
              PE_SINUSOID_CELL_ARGS);
#endif
