/*
 * sinusoid.c -- the absolute sinusoidal table of Vaswani et al.: the entry
 * point and the portable cells (the AVX2 ones are in sinusoid_avx2.c).
 *
 * A table of n positions by dim columns is pure output: nothing is read but
 * dim/2 frequencies, so its floor is the time to write n * dim elements.
 *
 * Computing sin and cos of every element directly (sincos.h) costs about 40
 * vector operations per four angles, more than the stores on this kind of
 * machine.  The rows are therefore made one cell of the anchor grid
 * (PE_ANCHOR rows) at a time, as pe_sincos_group makes them (sincos.c): for
 * evenly spaced positions (an int n, k * arange(n)) an exact row every
 * PE_ANCHOR rows and the rows between rotated from it in float64, values
 * too close to zero recomputed, so float32 and float16 tables are within
 * 1 ulp of the float64 value; float64 tables, and positions that are not
 * evenly spaced, are computed directly.  A cell kernel fuses the rotation
 * with the stores: the rotating row stays in L1 and each row is rounded
 * and stored in its layout as it is made.
 *
 * The AVX2 cells do four columns per step; the portable ones the same
 * arithmetic one column at a time, so both give the same bits.  Cells of
 * rows are shared among OpenMP threads; a cell is never split, so the bits
 * do not depend on the thread count either.
 */
#include <math.h>

#include "pe.h"
#include "simd.h"
#include "sincos.h"
#include "sinusoid.h"

/* Rows [r0, r0 + n) of the table: row 0 of the cell directly, the others
 * rotated from it where pe_group_rotates allows. */
PE_INLINE void cell_scalar(struct pe_rotor *rt, const double *pos, ptrdiff_t r0, ptrdiff_t n,
                           const double *freq, ptrdiff_t half, double wmax, char *out,
                           ptrdiff_t row_stride, const int layout, const int dtype)
{
    double m = 0.0;
    int rotate = pe_group_rotates(pe_sincos_row_scalar, rt, (const char *)(pos + r0), sizeof *pos,
                                  n, freq, half, wmax, dtype != PE_F64, &m);
    double *s = rt->s, *c = rt->c;
    for (ptrdiff_t r = 0; r < n; ++r) {
        double p = pos[r0 + r];
        char *row = out + (r0 + r) * row_stride;
        if (!rotate || r == 0) {
            for (ptrdiff_t j = 0; j < half; ++j) {
                pe_sincos1(p * freq[j], &s[j], &c[j]);
                pe_sinusoid_store1(row, j, half, layout, dtype, s[j], c[j]);
            }
        } else {
            pe_sinusoid_rotate_tail(row, 0, half, s, c, rt->sd, rt->cd, freq, m, p, layout, dtype);
        }
    }
}

PE_SPECIALISE(const pe_sinusoid_cell_fn, pe_sinusoid_cell_scalar, cell_scalar,
              PE_SINUSOID_CELL_PARAMS, PE_SINUSOID_CELL_ARGS);

struct sinusoid_job {
    pe_sinusoid_cell_fn cell;
    const double *pos, *freq;
    ptrdiff_t half, row_stride;
    double wmax;
    char *out;
};

static void sinusoid_cell(void *ctx, struct pe_rotor *rt, ptrdiff_t r0, ptrdiff_t n)
{
    const struct sinusoid_job *j = ctx;
    j->cell(rt, j->pos, r0, n, j->freq, j->half, j->wmax, j->out, j->row_stride);
}

int pe_sinusoid(const struct pe_kernels *k, const double *pos, ptrdiff_t n_pos, const double *freq,
                ptrdiff_t half, int layout, int dtype, char *out, ptrdiff_t row_stride,
                int nthreads)
{
    struct sinusoid_job job = {k->sinusoid_cell[layout][dtype], pos, freq, half, row_stride,
                               pe_max_abs(freq, half),          out};
    return pe_for_each_cell(n_pos, half, n_pos * half * 2 >= PE_PARALLEL_MIN, nthreads,
                            sinusoid_cell, &job);
}
