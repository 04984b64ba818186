/*
 * rope_table.c -- the cos/sin tables of RoPE: a tile's, for apply_rope
 * (rope.c), and rope_cos_sin's.
 *
 * The angle is the float64 product pos * freq[i] and its sine and cosine
 * are computed in float64 (the kernels' sincos_row), multiplied by the
 * attention factor and rounded once: to the compute precision for a tile
 * (float32 for float16/float32 data, float64 for float64 data), to the
 * table's dtype for rope_cos_sin.  Forming the phase in float32 instead, as
 * many implementations do, loses most of its digits at positions near
 * 2**24; here cos and sin are within 1 ulp there.
 *
 * Rows whose positions are evenly spaced (the usual arange, with or without
 * an offset) are made by rotation (pe_sincos_group): an exact anchor row
 * every PE_ANCHOR rows of the index along the axis the positions vary on,
 * which is always an axis of the caller's array (never merged with another
 * along which the positions vary), and tiles are whole cells of that grid,
 * so the bits depend neither on the tiling, the thread count nor the
 * memory layout; a few times cheaper than a sincos and just as accurate
 * after rounding to float32.  float64 tables are always direct.
 */
#include <math.h>

#include "pe.h"
#include "rope.h"
#include "simd.h"
#include "sincos.h"

/* ---- a tile's table (apply_rope) ---- */

/* Where a tile's rows go: row j of tab, cos then sin of the angles, times
 * scale (sin times sscale: negated for the inverse rotation), rounded once
 * to float32 or float64. */
struct table_sink {
    char *tab;
    ptrdiff_t half;
    double scale, sscale;
    int f64;
};

static void emit_table_row(void *ctx, ptrdiff_t j, const double *s, const double *c)
{
    const struct table_sink *k = ctx;
    ptrdiff_t half = k->half;
    if (k->f64) {
        double *t = (double *)k->tab + j * 2 * half;
        for (ptrdiff_t i = 0; i < half; ++i) {
            t[i] = c[i] * k->scale;
            t[half + i] = s[i] * k->sscale;
        }
    } else {
        float *t = (float *)k->tab + j * 2 * half;
        for (ptrdiff_t i = 0; i < half; ++i) {
            t[i] = (float)(c[i] * k->scale);
            t[half + i] = (float)(s[i] * k->sscale);
        }
    }
}

void pe_rope_fill_table(const struct pe_kernels *k, const char *pos, ptrdiff_t pos_stride,
                        ptrdiff_t n, const double *freq, ptrdiff_t half, double wmax, double scale,
                        int inverse, int tab_f64, char *tab, struct pe_rotor *rt)
{
    for (ptrdiff_t g0 = 0; g0 < n; g0 += PE_ANCHOR) {
        ptrdiff_t len = n - g0 < PE_ANCHOR ? n - g0 : PE_ANCHOR;
        struct table_sink sink = {tab + g0 * 2 * half * (tab_f64 ? 8 : 4), half, scale,
                                  inverse ? -scale : scale, tab_f64};
        pe_sincos_group(k, rt, pos + g0 * pos_stride, pos_stride, len, freq, half, wmax, !tab_f64,
                        emit_table_row, &sink);
    }
}

/* ---- cos/sin tables (rope_cos_sin) ---- */

/* Where rows of rope_cos_sin go: rows r0 + j of cos_out and sin_out. */
struct pair_sink {
    char *cos_out, *sin_out;
    ptrdiff_t cos_stride, sin_stride, r0, half;
    double scale;
};

/* Row j: each value twice, in the layout, rounded once to dtype. */
PE_INLINE void emit_pair(void *ctx, ptrdiff_t j, const double *s, const double *c, const int layout,
                         const int dtype)
{
    const struct pair_sink *k = ctx;
    char *crow = k->cos_out + (k->r0 + j) * k->cos_stride;
    char *srow = k->sin_out + (k->r0 + j) * k->sin_stride;
    ptrdiff_t half = k->half;
    for (ptrdiff_t i = 0; i < half; ++i) {
        double cv = c[i] * k->scale, sv = s[i] * k->scale;
        ptrdiff_t a = layout == PE_ROPE_HALF ? i : 2 * i;
        ptrdiff_t b = layout == PE_ROPE_HALF ? half + i : 2 * i + 1;
        pe_store(crow, a, dtype, cv);
        pe_store(crow, b, dtype, cv);
        pe_store(srow, a, dtype, sv);
        pe_store(srow, b, dtype, sv);
    }
}

PE_SPECIALISE(static const pe_row_fn, emit_pair_row, emit_pair,
              (void *ctx, ptrdiff_t j, const double *s, const double *c), (ctx, j, s, c));

struct table_job {
    const struct pe_kernels *k;
    const double *pos, *freq;
    double wmax;
    int dtype;
    pe_row_fn emit;
    struct pair_sink sink; /* its r0 set per cell */
};

static void table_cell(void *ctx, struct pe_rotor *rt, ptrdiff_t r0, ptrdiff_t n)
{
    const struct table_job *j = ctx;
    struct pair_sink sink = j->sink;
    sink.r0 = r0;
    pe_sincos_group(j->k, rt, (const char *)(j->pos + r0), sizeof *j->pos, n, j->freq, sink.half,
                    j->wmax, j->dtype != PE_F64, j->emit, &sink);
}

int pe_rope_table(const struct pe_kernels *k, const double *pos, ptrdiff_t n, const double *freq,
                  ptrdiff_t half, double scale, int layout, int dtype, char *cos_out,
                  ptrdiff_t cos_stride, char *sin_out, ptrdiff_t sin_stride, int nthreads)
{
    struct table_job job = {k,
                            pos,
                            freq,
                            pe_max_abs(freq, half),
                            dtype,
                            emit_pair_row[layout][dtype],
                            {cos_out, sin_out, cos_stride, sin_stride, 0, half, scale}};
    return pe_for_each_cell(n, half, n * half * 4 >= PE_PARALLEL_MIN, nthreads, table_cell, &job);
}
