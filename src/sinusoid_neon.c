/*
 * sinusoid_neon.c -- the cells of sinusoid.c on the NEON path: each row
 * made two columns at a time (pe_sincos_group with the NEON sincos_row and
 * rotate_row), then rounded and stored four columns at a time as the
 * portable cells round them (the same bits).  float64 -> float16 and bfloat16 go through FCVTXN,
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

/* Where a cell's rows go: the table, its row stride, the cell's first row. */
struct cell_out {
    char *out;
    ptrdiff_t row_stride, r0, half;
};

/* Row j of a cell, rounded and stored four columns at a time while it is
 * in L1. */
PE_INLINE void emit_row(void *ctx, ptrdiff_t j, const double *s, const double *c, const int layout,
                        const int dtype)
{
    const struct cell_out *k = ctx;
    char *row = k->out + (k->r0 + j) * k->row_stride;
    ptrdiff_t i = 0, half = k->half;
    for (; i + 4 <= half; i += 4)
        store4(row, i, half, layout, dtype, vld1q_f64(s + i), vld1q_f64(s + i + 2),
               vld1q_f64(c + i), vld1q_f64(c + i + 2));
    for (; i < half; ++i)
        pe_sinusoid_store1(row, i, half, layout, dtype, s[i], c[i]);
}

PE_SPECIALISE(static const pe_row_fn, emit_rows, emit_row,
              (void *ctx, ptrdiff_t j, const double *s, const double *c), (ctx, j, s, c));

/* The cell of sinusoid.c's cell_scalar: its rows made by pe_sincos_group
 * with the NEON sincos_row and rotate_row (the same rows as cell_scalar
 * makes, the same bits), each stored as it is made. */
PE_INLINE void cell_neon(struct pe_rotor *rt, const double *pos, ptrdiff_t r0, ptrdiff_t n,
                         const double *freq, ptrdiff_t half, double wmax, char *out,
                         ptrdiff_t row_stride, const int layout, const int dtype)
{
    struct cell_out k = {out, row_stride, r0, half};
    pe_sincos_group(&pe_kernels_neon, rt, (const char *)(pos + r0), sizeof *pos, n, freq, half,
                    wmax, dtype != PE_F64, emit_rows[layout][dtype], &k);
}

PE_SPECIALISE(const pe_sinusoid_cell_fn, pe_sinusoid_cell_neon, cell_neon, PE_SINUSOID_CELL_PARAMS,
              PE_SINUSOID_CELL_ARGS);
#endif
