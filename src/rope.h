/*
 * rope.h -- what the files of apply_rope share: a run of rows (the unit the
 * row kernels of rope_run.c and rope_avx2.c rotate), the rotation of one
 * row's pairs in portable C (the portable kernels, and the tails of the
 * AVX2 ones), and the cos/sin table of a tile (rope_table.c).  The plan of
 * the iteration, and the entry point, are in rope.c.
 */
#ifndef PE_ROPE_H
#define PE_ROPE_H

#include <math.h>
#include <string.h>

#include "pe.h"
#include "simd.h"
#include "sincos.h"

/* Rows of an outer dimension rotated together with one cos/sin row when the
 * cos/sin change along the innermost dimension. */
#define PE_ROPE_LANES 4

/* A run of rows that the innermost loop rotates: n rows (row m at x +
 * m*xs, out at o + m*os, its cos/sin at tab + m*ts: cos[half] then
 * sin[half], float32 or float64), each together with `lanes` rows of an
 * outer dimension that share its cos/sin (lane g at + g*lxs, + g*los).
 * The layout and dtype are those of the kernel (the table entry) it is
 * handed to. */
struct pe_rope_run {
    const char *x;
    char *o;
    const char *tab;
    ptrdiff_t xs, os, ts, n;
    ptrdiff_t lanes, lxs, los;
    ptrdiff_t half, dim;
    int stream;   /* the output is large: non-temporal stores where aligned */
    char *bounce; /* a thread's buffer of one row per lane (rope_avx2.c) */
};

/* Rotate pairs [i0, half) of one row of type dtype, read and written in
 * the places the layout says (the layout-changing ones need o != x).  tab: the row's cos
 * then sin (already scaled, sin negated for the inverse), float64 for
 * float64 data and float32 otherwise: float16 and bfloat16 are rotated in
 * float32 and rounded once.  a c - b s is fma(a, c, b (-s)): b (-s) is
 * -(b s) exactly, and a NaN b passes through with its own sign whether or
 * not the compiler turns this into a subtracting FMA (as the vector kernels
 * subtract), where negating the product would flip it on one path only
 * (PE_NEG_APART keeps AArch64's FNMUL from doing that). */
PE_INLINE void pe_rope_rotate_row(const char *x, char *o, const char *tab, ptrdiff_t half,
                                  ptrdiff_t i0, const int layout, const int dtype)
{
    /* where a pair is read (ia, ib) and written (oa, ob) */
    const int in_half = layout == PE_ROPE_HALF || layout == PE_ROPE_HALF_TO_INTERLEAVED;
    const int out_half = layout == PE_ROPE_HALF || layout == PE_ROPE_INTERLEAVED_TO_HALF;
    for (ptrdiff_t i = i0; i < half; ++i) {
        ptrdiff_t ia = in_half ? i : 2 * i, ib = in_half ? i + half : 2 * i + 1;
        ptrdiff_t oa = out_half ? i : 2 * i, ob = out_half ? i + half : 2 * i + 1;
        if (dtype == PE_F64) {
            const double *c = (const double *)tab, *s = c + half, *xd = (const double *)x;
            double a = xd[ia], b = xd[ib];
            ((double *)o)[oa] = fma(a, c[i], b * PE_NEG_APART(s[i]));
            ((double *)o)[ob] = fma(b, c[i], a * s[i]);
            continue;
        }
        const float *c = (const float *)tab, *s = c + half;
        float a, b;
        if (dtype == PE_F32) {
            a = ((const float *)x)[ia], b = ((const float *)x)[ib];
        } else {
            a = pe_load16(((const uint16_t *)x)[ia], dtype);
            b = pe_load16(((const uint16_t *)x)[ib], dtype);
        }
        float ra = fmaf(a, c[i], b * PE_NEG_APART(s[i])), rb = fmaf(b, c[i], a * s[i]);
        if (dtype == PE_F32) {
            ((float *)o)[oa] = ra, ((float *)o)[ob] = rb;
        } else {
            ((uint16_t *)o)[oa] = pe_store16(ra, dtype);
            ((uint16_t *)o)[ob] = pe_store16(rb, dtype);
        }
    }
}

/* The columns past the rotary part are copied (nothing to do in place). */
PE_INLINE void pe_rope_pass_through(const char *x, char *o, ptrdiff_t half, ptrdiff_t dim,
                                    const int dtype)
{
    size_t es = pe_itemsize(dtype);
    if (x != o && dim > 2 * half)
        memcpy(o + 2 * half * es, x + 2 * half * es, (size_t)(dim - 2 * half) * es);
}

/* A path's rotation of the first pairs of a row (as pe_rope_rotate_row
 * rotates them), returning how many it rotated. */
typedef ptrdiff_t (*pe_rope_head_fn)(const char *x, char *o, const char *tab, ptrdiff_t half,
                                     const int layout, const int dtype);

/* The rows of a run: each row's first pairs rotated by head (NULL: none),
 * the rest by pe_rope_rotate_row, the columns past them copied; the body
 * of the portable and the NEON rope_run (head a constant, inlined). */
PE_INLINE void pe_rope_run_rows(const struct pe_rope_run *r, pe_rope_head_fn head, const int layout,
                                const int dtype)
{
    ptrdiff_t half = r->half;
    for (ptrdiff_t m = 0; m < r->n; ++m) {
        const char *t = r->tab + m * r->ts;
        for (ptrdiff_t g = 0; g < r->lanes; ++g) {
            const char *xr = r->x + m * r->xs + g * r->lxs;
            char *orow = r->o + m * r->os + g * r->los;
            ptrdiff_t i = head != NULL ? head(xr, orow, t, half, layout, dtype) : 0;
            pe_rope_rotate_row(xr, orow, t, half, i, layout, dtype);
            pe_rope_pass_through(xr, orow, half, r->dim, dtype);
        }
    }
}

/* Rows j < n of a tile's table for the positions at pos + j * pos_stride
 * bytes: cos then sin of pos * freq[i], times scale (sin negated if
 * inverse; times the xPos factor of xpos, divided by it if inverse,
 * xpos_scratch 2 * half doubles then),
 * rounded once to float64 (tab_f64) or float32.  Row 0 is a
 * multiple of PE_ANCHOR along its dimension (rope_table.c). */
void pe_rope_fill_table(const struct pe_kernels *k, const char *pos, ptrdiff_t pos_stride,
                        ptrdiff_t n, const double *freq, ptrdiff_t half, double wmax, double scale,
                        int inverse, const struct pe_xpos *xpos, double *xpos_scratch, int tab_f64,
                        char *tab, struct pe_rotor *rt);

/* The pairs of a row grouped by the channel of their position (M-RoPE,
 * axial RoPE): channel c holds the pairs idx[start[c]] .. idx[start[c+1]-1]
 * in increasing order, with their frequencies freq[start[c]] .., and
 * wmax[c] the largest frequency of the row (the rotation test of
 * pe_sincos_group, the same for every channel); its positions are stride bytes times c past
 * a row's. */
struct pe_rope_chan {
    int n;
    ptrdiff_t stride;
    ptrdiff_t start[PE_ROPE_MAXCHAN + 1];
    double wmax[PE_ROPE_MAXCHAN];
    ptrdiff_t *idx;
    double *freq;
};

/* Groups the half pairs by channel[i] (0 <= channel[i] < nchan <=
 * PE_ROPE_MAXCHAN).  0, -1 if memory ran out, -2 on a channel out of range;
 * pe_rope_chan_free releases it in every case. */
int pe_rope_chan_init(struct pe_rope_chan *ch, const int32_t *channel, int nchan, ptrdiff_t stride,
                      const double *freq, ptrdiff_t half);
void pe_rope_chan_free(struct pe_rope_chan *ch);

/* pe_rope_fill_table with positions in channels: each channel's pairs are
 * made from its own positions as a group of their own (rotated along the
 * anchor grid where that channel's positions are evenly spaced, direct
 * otherwise), rt's buffers shared out among them. */
void pe_rope_fill_table_chan(const struct pe_kernels *k, const struct pe_rope_chan *ch,
                             const char *pos, ptrdiff_t pos_stride, ptrdiff_t n, ptrdiff_t half,
                             double scale, int inverse, int tab_f64, char *tab,
                             const struct pe_rotor *rt);

#endif
