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
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

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

int pe_rope_table(const struct pe_kernels *k, const double *pos, ptrdiff_t n, const double *freq,
                  ptrdiff_t half, double scale, int layout, int dtype, char *cos_out,
                  ptrdiff_t cos_stride, char *sin_out, ptrdiff_t sin_stride, int nthreads)
{
    ptrdiff_t ncells = (n + PE_ANCHOR - 1) / PE_ANCHOR;
    int parallel = nthreads > 1 && ncells > 1 && n * half * 4 >= PE_PARALLEL_MIN;
    if (!parallel)
        nthreads = 1;
    ptrdiff_t per_thread = 4 * half;
    double *scratch = malloc((size_t)(per_thread * nthreads) * sizeof *scratch);
    if (scratch == NULL)
        return -1;
    double wmax = pe_max_abs(freq, half);
    pe_row_fn emit = emit_pair_row[layout][dtype];
#pragma omp parallel num_threads(nthreads) if (parallel)
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        double *buf = scratch + tid * per_thread;
        struct pe_rotor rt = {buf, buf + half, buf + 2 * half, buf + 3 * half, NAN};
#pragma omp for schedule(dynamic, 2)
        for (ptrdiff_t t = 0; t < ncells; ++t) {
            ptrdiff_t r0 = t * PE_ANCHOR, len = n - r0 < PE_ANCHOR ? n - r0 : PE_ANCHOR;
            struct pair_sink sink = {cos_out, sin_out, cos_stride, sin_stride, r0, half, scale};
            pe_sincos_group(k, &rt, (const char *)(pos + r0), sizeof *pos, len, freq, half, wmax,
                            dtype != PE_F64, emit, &sink);
        }
    }
    free(scratch);
    return 0;
}
