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

/* ---- xPos ---- */

/* The exponent t of the xPos factors at position p: pair i's factor is
 * exp(log_zeta[i] * t) = zeta_i ** t, all in float64 (to a few float64
 * ulps: rounded once to float32 with cos or sin, within 1 ulp of the exact
 * value). */
PE_INLINE double xpos_exponent(const struct pe_xpos *xp, double p)
{
    return (p - xp->centre) * xp->rate;
}

/* ---- a tile's table (apply_rope) ---- */

/* Where a tile's rows go: row j of tab, cos then sin of the angles, times
 * scale (sin times sscale: negated for the inverse rotation), and with
 * xPos times its factors at the row's position (pos + j * pos_stride),
 * rounded once to float32 or float64.
 *
 * The factors of a float32 table follow a run of evenly spaced positions by
 * multiplying by the step's factors (f[i] *= g[i], g[i] = zeta_i ** (step *
 * rate)): exact (exp) at the first two rows of each anchor group and
 * wherever the spacing changes, so that the bits depend only on the group's
 * positions, and at most 30 float64 multiplications from an exact value:
 * a relative error of a few 1e-15 before the rounding to float32, where
 * one ulp is 6e-8 or more.  float64 tables are exact at every row. */
struct table_sink {
    char *tab;
    ptrdiff_t half;
    double scale, sscale;
    int f64;
    const struct pe_xpos *xpos; /* NULL: none */
    const char *pos;
    ptrdiff_t pos_stride;
    double *f, *g;     /* xPos scratch: the current factors, the step's */
    double prev, step; /* the last row's position, and the spacing before it */
    int have_g;        /* g holds the factors of step */
};

/* The xPos factors f of the row at position p (k->xpos set). */
static void xpos_row(struct table_sink *k, ptrdiff_t j, double p)
{
    const double *lz = k->xpos->log_zeta;
    ptrdiff_t half = k->half;
    double d = p - k->prev;
    if (!k->f64 && j >= 2 && d == k->step) {
        if (!k->have_g) {
            double e = d * k->xpos->rate;
            for (ptrdiff_t i = 0; i < half; ++i)
                k->g[i] = exp(lz[i] * e);
            k->have_g = 1;
        }
        for (ptrdiff_t i = 0; i < half; ++i)
            k->f[i] *= k->g[i];
    } else {
        double e = xpos_exponent(k->xpos, p);
        for (ptrdiff_t i = 0; i < half; ++i)
            k->f[i] = exp(lz[i] * e);
        k->have_g = 0;
        k->step = j >= 1 ? d : NAN;
    }
    k->prev = p;
}

static void emit_table_row(void *ctx, ptrdiff_t j, const double *s, const double *c)
{
    struct table_sink *k = ctx;
    ptrdiff_t half = k->half;
    if (k->xpos) {
        xpos_row(k, j, *(const double *)(k->pos + j * k->pos_stride));
        const double *f = k->f;
        if (k->f64) {
            double *t = (double *)k->tab + j * 2 * half;
            for (ptrdiff_t i = 0; i < half; ++i) {
                t[i] = c[i] * k->scale * f[i];
                t[half + i] = s[i] * k->sscale * f[i];
            }
        } else {
            float *t = (float *)k->tab + j * 2 * half;
            for (ptrdiff_t i = 0; i < half; ++i) {
                t[i] = (float)(c[i] * k->scale * f[i]);
                t[half + i] = (float)(s[i] * k->sscale * f[i]);
            }
        }
        return;
    }
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
                        int inverse, const struct pe_xpos *xpos, double *xpos_scratch, int tab_f64,
                        char *tab, struct pe_rotor *rt)
{
    /* the inverse divides by the factors: the rate's sign flips */
    struct pe_xpos xp = {NULL, 0.0, 0.0};
    if (xpos != NULL && xpos->log_zeta != NULL)
        xp = *xpos, xp.rate = inverse ? -xp.rate : xp.rate;
    for (ptrdiff_t g0 = 0; g0 < n; g0 += PE_ANCHOR) {
        ptrdiff_t len = n - g0 < PE_ANCHOR ? n - g0 : PE_ANCHOR;
        struct table_sink sink = {tab + g0 * 2 * half * (tab_f64 ? 8 : 4),
                                  half,
                                  scale,
                                  inverse ? -scale : scale,
                                  tab_f64,
                                  xp.log_zeta ? &xp : NULL,
                                  pos + g0 * pos_stride,
                                  pos_stride,
                                  xpos_scratch,
                                  xpos_scratch + half,
                                  NAN,
                                  NAN,
                                  0};
        pe_sincos_group(k, rt, pos + g0 * pos_stride, pos_stride, len, freq, half, wmax, !tab_f64,
                        emit_table_row, &sink);
    }
}

/* ---- cos/sin tables (rope_cos_sin) ---- */

/* Where rows of rope_cos_sin go: rows r0 + j of cos_out and sin_out (each
 * value once if not full), with xPos at the positions pos. */
struct pair_sink {
    char *cos_out, *sin_out;
    ptrdiff_t cos_stride, sin_stride, r0, half;
    double scale;
    const struct pe_xpos *xpos; /* NULL: none */
    const double *pos;
    int full;
};

/* Row j: each value twice in the layout (once if not full), rounded once
 * to dtype. */
PE_INLINE void emit_pair(void *ctx, ptrdiff_t j, const double *s, const double *c, const int layout,
                         const int dtype)
{
    const struct pair_sink *k = ctx;
    char *crow = k->cos_out + (k->r0 + j) * k->cos_stride;
    char *srow = k->sin_out + (k->r0 + j) * k->sin_stride;
    ptrdiff_t half = k->half;
    double e = k->xpos ? xpos_exponent(k->xpos, k->pos[k->r0 + j]) : 0.0;
    for (ptrdiff_t i = 0; i < half; ++i) {
        double cv = c[i] * k->scale, sv = s[i] * k->scale;
        if (k->xpos) {
            double f = exp(k->xpos->log_zeta[i] * e);
            cv *= f, sv *= f;
        }
        if (!k->full) {
            pe_store(crow, i, dtype, cv);
            pe_store(srow, i, dtype, sv);
            continue;
        }
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
                  ptrdiff_t cos_stride, char *sin_out, ptrdiff_t sin_stride,
                  const struct pe_xpos *xpos, int full, int nthreads)
{
    struct table_job job = {k,
                            pos,
                            freq,
                            pe_max_abs(freq, half),
                            dtype,
                            emit_pair_row[layout][dtype],
                            {cos_out, sin_out, cos_stride, sin_stride, 0, half, scale,
                             xpos != NULL && xpos->log_zeta != NULL ? xpos : NULL, pos, full}};
    return pe_for_each_cell(n, half, n * half * 4 >= PE_PARALLEL_MIN, nthreads, table_cell, &job);
}
