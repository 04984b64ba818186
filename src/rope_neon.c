/*
 * rope_neon.c -- the row kernels of apply_rope on the NEON path: four
 * pairs (float32, float16 through FCVTL/FCVTN, bfloat16 through shifts) or
 * two (float64) per step, interleaved pairs split and joined by the
 * structure loads and stores (LD2, ST2), the arithmetic of rope_run.c (one
 * multiply and one FMA per output, the same bits); the pairs past the last
 * full step by pe_rope_rotate_row (rope.h's pe_rope_run_rows).
 */
#include "pe.h"
#include "rope.h"
#include "simd.h"

#include "neon.h"

#if PE_ARM
/* Pairs [0, i) of one row rotated, i the first pair not done (rope.h's
 * pe_rope_rotate_row, a step of pairs at a time); the layout and dtype as
 * there. */
PE_INLINE ptrdiff_t rotate_row_neon(const char *x, char *o, const char *tab, ptrdiff_t half,
                                    const int layout, const int dtype)
{
    const int in_half = layout == PE_ROPE_HALF || layout == PE_ROPE_HALF_TO_INTERLEAVED;
    const int out_half = layout == PE_ROPE_HALF || layout == PE_ROPE_INTERLEAVED_TO_HALF;
    ptrdiff_t i = 0;
    if (dtype == PE_F64) {
        const double *c = (const double *)tab, *s = c + half, *xd = (const double *)x;
        double *od = (double *)o;
        for (; i + 2 <= half; i += 2) {
            float64x2_t a, b;
            if (in_half) {
                a = vld1q_f64(xd + i), b = vld1q_f64(xd + half + i);
            } else {
                float64x2x2_t p = vld2q_f64(xd + 2 * i);
                a = p.val[0], b = p.val[1];
            }
            float64x2_t cv = vld1q_f64(c + i), sv = vld1q_f64(s + i);
            float64x2x2_t r;
            r.val[0] = vfmaq_f64(vmulq_f64(b, vnegq_f64(sv)), a, cv);
            r.val[1] = vfmaq_f64(vmulq_f64(a, sv), b, cv);
            if (out_half)
                vst1q_f64(od + i, r.val[0]), vst1q_f64(od + half + i, r.val[1]);
            else
                vst2q_f64(od + 2 * i, r);
        }
        return i;
    }
    const float *c = (const float *)tab, *s = c + half;
    for (; i + 4 <= half; i += 4) {
        float32x4_t a, b;
        if (dtype == PE_F32) {
            const float *xf = (const float *)x;
            if (in_half) {
                a = vld1q_f32(xf + i), b = vld1q_f32(xf + half + i);
            } else {
                float32x4x2_t p = vld2q_f32(xf + 2 * i);
                a = p.val[0], b = p.val[1];
            }
        } else {
            const uint16_t *xh = (const uint16_t *)x;
            if (in_half) {
                a = pe_load16x4(xh + i, dtype), b = pe_load16x4(xh + half + i, dtype);
            } else {
                uint16x4x2_t p = vld2_u16(xh + 2 * i);
                a = pe_widen16x4(p.val[0], dtype), b = pe_widen16x4(p.val[1], dtype);
            }
        }
        float32x4_t cv = vld1q_f32(c + i), sv = vld1q_f32(s + i);
        float32x4_t ra = vfmaq_f32(vmulq_f32(b, vnegq_f32(sv)), a, cv);
        float32x4_t rb = vfmaq_f32(vmulq_f32(a, sv), b, cv);
        if (dtype == PE_F32) {
            float *of = (float *)o;
            if (out_half) {
                vst1q_f32(of + i, ra), vst1q_f32(of + half + i, rb);
            } else {
                float32x4x2_t r = {{ra, rb}};
                vst2q_f32(of + 2 * i, r);
            }
        } else {
            uint16_t *oh = (uint16_t *)o;
            uint16x4x2_t r = {{pe_round16x4(ra, dtype), pe_round16x4(rb, dtype)}};
            if (out_half)
                vst1_u16(oh + i, r.val[0]), vst1_u16(oh + half + i, r.val[1]);
            else
                vst2_u16(oh + 2 * i, r);
        }
    }
    return i;
}

PE_INLINE void run_neon(const struct pe_rope_run *r, const int layout, const int dtype)
{
    pe_rope_run_rows(r, rotate_row_neon, layout, dtype);
}

PE_SPECIALISE_ROPE(const pe_rope_run_fn, pe_rope_run_neon, run_neon, (const struct pe_rope_run *r),
                   (r));
#endif
