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
 *
 * Positions in channels (M-RoPE's temporal, height and width rows, the rows
 * and columns of axial RoPE): each pair takes the position of its channel.
 * The pairs of one channel are made as a group of their own from that
 * channel's positions, with the same anchor grid, so the promises above
 * hold per channel: the bits of a pair depend on its channel's positions in
 * its cell of the grid, never on tiling, threads or layout.  The sin and cos
 * of a pair are those of the float64 product of its position and frequency,
 * whatever the channel, and a channel's cell is rotated or direct by the
 * same test as a row's (the largest frequency of the whole row), so
 * positions that agree across channels (text tokens of M-RoPE) give the
 * bits of one position per row.  In a cell that is not rotated, a
 * channel's row whose position already appeared in the cell (a patch's row
 * or column: vision positions repeat) copies that row's values, the bits of
 * computing them again, at a fraction of the cost.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* The first n values of row j (of 2 * half: cos, then sin), with xPos's
 * factors (all half values) when k->xpos is set. */
static void emit_run(struct table_sink *k, ptrdiff_t j, const double *s, const double *c,
                     ptrdiff_t n)
{
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
        for (ptrdiff_t i = 0; i < n; ++i) {
            t[i] = c[i] * k->scale;
            t[half + i] = s[i] * k->sscale;
        }
    } else {
        float *t = (float *)k->tab + j * 2 * half;
        for (ptrdiff_t i = 0; i < n; ++i) {
            t[i] = (float)(c[i] * k->scale);
            t[half + i] = (float)(s[i] * k->sscale);
        }
    }
}

static void emit_table_row(void *ctx, ptrdiff_t j, const double *s, const double *c)
{
    emit_run(ctx, j, s, c, ((struct table_sink *)ctx)->half);
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

/* ---- positions in channels ---- */

int pe_rope_chan_init(struct pe_rope_chan *ch, const int32_t *channel, int nchan, ptrdiff_t stride,
                      const double *freq, ptrdiff_t half)
{
    ch->n = nchan;
    ch->stride = stride;
    ch->idx = NULL;
    ch->freq = NULL;
    if (nchan < 1 || nchan > PE_ROPE_MAXCHAN)
        return -2;
    ptrdiff_t count[PE_ROPE_MAXCHAN] = {0};
    for (ptrdiff_t i = 0; i < half; ++i) {
        if (channel[i] < 0 || channel[i] >= nchan)
            return -2;
        ++count[channel[i]];
    }
    ch->idx = malloc((size_t)(half > 0 ? half : 1) * sizeof *ch->idx);
    ch->freq = malloc((size_t)(half > 0 ? half : 1) * sizeof *ch->freq);
    if (ch->idx == NULL || ch->freq == NULL)
        return -1;
    ch->start[0] = 0;
    for (int c = 0; c < nchan; ++c)
        ch->start[c + 1] = ch->start[c] + count[c];
    ptrdiff_t fill[PE_ROPE_MAXCHAN];
    for (int c = 0; c < nchan; ++c)
        fill[c] = ch->start[c];
    for (ptrdiff_t i = 0; i < half; ++i) {
        ptrdiff_t q = fill[channel[i]]++;
        ch->idx[q] = i;
        ch->freq[q] = freq[i];
    }
    /* every channel decides whether to rotate as one position per row
     * would (by the largest frequency of the row), so that equal positions
     * give the bits of one position per row */
    double wmax = pe_max_abs(freq, half);
    for (int c = 0; c < nchan; ++c)
        ch->wmax[c] = wmax;
    return 0;
}

void pe_rope_chan_free(struct pe_rope_chan *ch)
{
    free(ch->idx);
    free(ch->freq);
    ch->idx = NULL;
    ch->freq = NULL;
}

/* A channel's rotor: its share of rt's buffers (the pairs of the channel
 * occupy [start, start + count) of each), no step yet. */
static struct pe_rotor chan_rotor(const struct pe_rotor *rt, ptrdiff_t start)
{
    struct pe_rotor r = {rt->s + start, rt->c + start, rt->sd + start, rt->cd + start, NAN};
    return r;
}

/* Where a channel's pairs of a tile's rows go: pair idx[q] of row j. */
struct chan_table_sink {
    char *tab;
    const ptrdiff_t *idx;
    ptrdiff_t count, half;
    double scale, sscale;
    int f64;
};

static void emit_chan_table_row(void *ctx, ptrdiff_t j, const double *s, const double *c)
{
    const struct chan_table_sink *k = ctx;
    ptrdiff_t half = k->half;
    if (k->idx[k->count - 1] - k->idx[0] == k->count - 1) {
        /* the channel's pairs are a run (sections in turn): a plain row */
        struct table_sink run = {k->tab + k->idx[0] * (k->f64 ? 8 : 4), half, k->scale, k->sscale,
                                 k->f64};
        emit_run(&run, j, s, c, k->count);
        return;
    }
    if (k->f64) {
        double *t = (double *)k->tab + j * 2 * half;
        for (ptrdiff_t q = 0; q < k->count; ++q) {
            t[k->idx[q]] = c[q] * k->scale;
            t[half + k->idx[q]] = s[q] * k->sscale;
        }
    } else {
        float *t = (float *)k->tab + j * 2 * half;
        for (ptrdiff_t q = 0; q < k->count; ++q) {
            t[k->idx[q]] = (float)(c[q] * k->scale);
            t[half + k->idx[q]] = (float)(s[q] * k->sscale);
        }
    }
}

/* An earlier row of the cell whose position has the bits of row j's, or -1. */
static ptrdiff_t earlier_row(const char *pos, ptrdiff_t stride, ptrdiff_t j)
{
    uint64_t p;
    memcpy(&p, pos + j * stride, sizeof p);
    for (ptrdiff_t r = 0; r < j; ++r) {
        uint64_t q;
        memcpy(&q, pos + r * stride, sizeof q);
        if (q == p)
            return r;
    }
    return -1;
}

/* The channel's pairs of row j copied from row r of the tile's table. */
static void copy_chan_row(const struct chan_table_sink *k, ptrdiff_t j, ptrdiff_t r)
{
    ptrdiff_t half = k->half, w = 2 * half;
    if (k->f64) {
        double *t = (double *)k->tab;
        for (ptrdiff_t q = 0; q < k->count; ++q) {
            ptrdiff_t i = k->idx[q];
            t[j * w + i] = t[r * w + i];
            t[j * w + half + i] = t[r * w + half + i];
        }
    } else {
        float *t = (float *)k->tab;
        for (ptrdiff_t q = 0; q < k->count; ++q) {
            ptrdiff_t i = k->idx[q];
            t[j * w + i] = t[r * w + i];
            t[j * w + half + i] = t[r * w + half + i];
        }
    }
}

void pe_rope_fill_table_chan(const struct pe_kernels *k, const struct pe_rope_chan *ch,
                             const char *pos, ptrdiff_t pos_stride, ptrdiff_t n, ptrdiff_t half,
                             double scale, int inverse, int tab_f64, char *tab,
                             const struct pe_rotor *rt)
{
    struct pe_rotor sub[PE_ROPE_MAXCHAN];
    for (int c = 0; c < ch->n; ++c)
        sub[c] = chan_rotor(rt, ch->start[c]);
    for (ptrdiff_t g0 = 0; g0 < n; g0 += PE_ANCHOR) {
        ptrdiff_t len = n - g0 < PE_ANCHOR ? n - g0 : PE_ANCHOR;
        for (int c = 0; c < ch->n; ++c) {
            ptrdiff_t s0 = ch->start[c], cnt = ch->start[c + 1] - s0;
            if (cnt == 0)
                continue;
            struct chan_table_sink sink = {tab + g0 * 2 * half * (tab_f64 ? 8 : 4),
                                           ch->idx + s0,
                                           cnt,
                                           half,
                                           scale,
                                           inverse ? -scale : scale,
                                           tab_f64};
            const char *p = pos + c * ch->stride + g0 * pos_stride;
            const double *freq = ch->freq + s0;
            double m;
            if (pe_group_rotates(k->sincos_row, &sub[c], p, pos_stride, len, freq, cnt, ch->wmax[c],
                                 !tab_f64, &m)) {
                pe_sincos_group(k, &sub[c], p, pos_stride, len, freq, cnt, ch->wmax[c], !tab_f64,
                                emit_chan_table_row, &sink);
                continue;
            }
            /* direct rows: a position met earlier in the cell (a patch's row
             * or column, which repeat) has its values already, the same
             * bits as computing them again */
            for (ptrdiff_t j = 0; j < len; ++j) {
                ptrdiff_t r = pos_stride == 0 ? (j > 0 ? 0 : -1) : earlier_row(p, pos_stride, j);
                if (r >= 0) {
                    copy_chan_row(&sink, j, r);
                    continue;
                }
                k->sincos_row(*(const double *)(p + j * pos_stride), freq, cnt, sub[c].s, sub[c].c);
                emit_chan_table_row(&sink, j, sub[c].s, sub[c].c);
            }
        }
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
    const ptrdiff_t *idx; /* positions in channels: the pairs of one channel */
    ptrdiff_t count;
};

/* Pair i's cos and sin, cv and sv, rounded once to dtype and stored twice
 * in rows crow and srow of a full table, in its layout. */
PE_INLINE void store_pair(char *crow, char *srow, ptrdiff_t i, ptrdiff_t half, double cv, double sv,
                          const int layout, const int dtype)
{
    ptrdiff_t a = layout == PE_ROPE_HALF ? i : 2 * i;
    ptrdiff_t b = layout == PE_ROPE_HALF ? half + i : 2 * i + 1;
    pe_store(crow, a, dtype, cv);
    pe_store(crow, b, dtype, cv);
    pe_store(srow, a, dtype, sv);
    pe_store(srow, b, dtype, sv);
}

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
        store_pair(crow, srow, i, half, cv, sv, layout, dtype);
    }
}

PE_SPECIALISE(static const pe_row_fn, emit_pair_row, emit_pair,
              (void *ctx, ptrdiff_t j, const double *s, const double *c), (ctx, j, s, c));

/* The same for the pairs idx[q] of one channel. */
PE_INLINE void emit_chan_pair(void *ctx, ptrdiff_t j, const double *s, const double *c,
                              const int layout, const int dtype)
{
    const struct pair_sink *k = ctx;
    char *crow = k->cos_out + (k->r0 + j) * k->cos_stride;
    char *srow = k->sin_out + (k->r0 + j) * k->sin_stride;
    ptrdiff_t half = k->half;
    for (ptrdiff_t q = 0; q < k->count; ++q) {
        ptrdiff_t i = k->idx[q];
        double cv = c[q] * k->scale, sv = s[q] * k->scale;
        store_pair(crow, srow, i, half, cv, sv, layout, dtype);
    }
}

PE_SPECIALISE(static const pe_row_fn, emit_chan_pair_row, emit_chan_pair,
              (void *ctx, ptrdiff_t j, const double *s, const double *c), (ctx, j, s, c));

struct table_job {
    const struct pe_kernels *k;
    const double *pos, *freq;
    double wmax;
    int dtype;
    pe_row_fn emit;
    struct pair_sink sink;           /* its r0 set per cell */
    const struct pe_rope_chan *chan; /* or NULL */
};

static void table_cell(void *ctx, struct pe_rotor *rt, ptrdiff_t r0, ptrdiff_t n)
{
    const struct table_job *j = ctx;
    struct pair_sink sink = j->sink;
    sink.r0 = r0;
    const struct pe_rope_chan *ch = j->chan;
    if (ch == NULL) {
        pe_sincos_group(j->k, rt, (const char *)(j->pos + r0), sizeof *j->pos, n, j->freq,
                        sink.half, j->wmax, j->dtype != PE_F64, j->emit, &sink);
        return;
    }
    for (int c = 0; c < ch->n; ++c) {
        ptrdiff_t s0 = ch->start[c];
        sink.idx = ch->idx + s0;
        sink.count = ch->start[c + 1] - s0;
        if (sink.count == 0)
            continue;
        struct pe_rotor sub = chan_rotor(rt, s0);
        pe_sincos_group(j->k, &sub, (const char *)(j->pos + r0) + c * ch->stride, sizeof *j->pos, n,
                        ch->freq + s0, sink.count, ch->wmax[c], j->dtype != PE_F64, j->emit, &sink);
    }
}

int pe_rope_table(const struct pe_kernels *k, const double *pos, ptrdiff_t n, const double *freq,
                  ptrdiff_t half, double scale, int layout, int dtype, char *cos_out,
                  ptrdiff_t cos_stride, char *sin_out, ptrdiff_t sin_stride, const int32_t *channel,
                  int nchan, const struct pe_xpos *xpos, int full, int nthreads)
{
    struct pe_rope_chan chan;
    struct table_job job = {k,
                            pos,
                            freq,
                            pe_max_abs(freq, half),
                            dtype,
                            emit_pair_row[layout][dtype],
                            {cos_out, sin_out, cos_stride, sin_stride, 0, half, scale,
                             xpos != NULL && xpos->log_zeta != NULL ? xpos : NULL, pos, full, NULL,
                             0},
                            NULL};
    if (channel != NULL) {
        if (job.sink.xpos != NULL || !full)
            return -2; /* full tables without xPos only */
        int rc = pe_rope_chan_init(&chan, channel, nchan, n * (ptrdiff_t)sizeof *pos, freq, half);
        if (rc != 0) {
            pe_rope_chan_free(&chan);
            return rc;
        }
        job.chan = &chan;
        job.emit = emit_chan_pair_row[layout][dtype];
    }
    int rc = pe_for_each_cell(n, half, n * half * 4 >= PE_PARALLEL_MIN, nthreads, table_cell, &job);
    if (channel != NULL)
        pe_rope_chan_free(&chan);
    return rc;
}
