/*
 * sincos.c -- rows of sin and cos of pos * freq[i] in float64, and their
 * rotation from one row to the next: the portable rows, and the groups of
 * rows every table is made of.
 *
 * Every table posenc writes (sinusoid, RoPE cos/sin) is a row of sin and cos
 * of the same angles.  One range reduction serves both (sincos.h; four
 * angles per step on the AVX2 path, sincos_avx2.c), so the tables are bound
 * by the stores, not by the C library's scalar sin() and cos().  Evenly
 * spaced positions take the cheaper route of pe_sincos_group: one row in
 * PE_ANCHOR directly, the others rotated from it, the one primitive both
 * sinusoid.c and rope_table.c build their tables on.
 */
#include <math.h>
#include <stdlib.h>
#include "pe.h"
#include "simd.h"
#include "sincos.h"

void pe_sincos_row_scalar(double pos, const double *freq, ptrdiff_t n, double *s, double *c)
{
    for (ptrdiff_t i = 0; i < n; ++i)
        pe_sincos1(pos * freq[i], &s[i], &c[i]);
}

void pe_rotate_row_scalar(double *s, double *c, const double *sd, const double *cd,
                          const double *freq, double pos, double m, ptrdiff_t n)
{
    for (ptrdiff_t i = 0; i < n; ++i)
        pe_rotate1(&s[i], &c[i], sd[i], cd[i], freq[i], m, pos);
}

int pe_group_rotates(pe_sincos_row_fn row, struct pe_rotor *rt, const char *pos, ptrdiff_t stride,
                     ptrdiff_t n, const double *freq, ptrdiff_t half, double wmax, int rotate,
                     double *m)
{
    double step = 0.0;
    rotate = rotate && n > 2 && pe_progression(pos, stride, n, &step);
    if (rotate) {
        /* the largest |position| of a progression is at one of its ends */
        double a = fabs(*(const double *)pos), b = fabs(*(const double *)(pos + (n - 1) * stride));
        *m = (a > b ? a : b) * 0x1p-26;
        rotate = *m * wmax <= PE_ROTATE_MAX; /* false for an infinite or NaN product */
    }
    if (rotate && !(step == rt->step)) {
        row(step, freq, half, rt->sd, rt->cd);
        rt->step = step;
    }
    return rotate;
}

void pe_sincos_group(const struct pe_kernels *k, struct pe_rotor *rt, const char *pos,
                     ptrdiff_t stride, ptrdiff_t n, const double *freq, ptrdiff_t half, double wmax,
                     int rotate, pe_row_fn emit, void *ctx)
{
    double m = 0.0;
    rotate = pe_group_rotates(k->sincos_row, rt, pos, stride, n, freq, half, wmax, rotate, &m);
    for (ptrdiff_t j = 0; j < n; ++j) {
        double p = *(const double *)(pos + j * stride);
        if (!rotate || j == 0)
            k->sincos_row(p, freq, half, rt->s, rt->c);
        else
            k->rotate_row(rt->s, rt->c, rt->sd, rt->cd, freq, p, m, half);
        emit(ctx, j, rt->s, rt->c);
    }
}

int pe_for_each_cell(ptrdiff_t n_rows, ptrdiff_t half, int parallel, int nthreads, pe_cell_fn cell,
                     void *ctx)
{
    ptrdiff_t ncells = (n_rows + PE_ANCHOR - 1) / PE_ANCHOR;
    parallel = parallel && nthreads > 1 && ncells > 1;
    if (!parallel)
        nthreads = 1;
    /* a thread's rotor: the current row and the step's sin and cos */
    ptrdiff_t per_thread = 4 * half;
    double *scratch = malloc((size_t)(per_thread * nthreads) * sizeof *scratch);
    if (scratch == NULL)
        return -1;
#pragma omp parallel num_threads(nthreads) if (parallel)
    {
        const int tid = pe_thread_num();
        double *buf = scratch + tid * per_thread;
        struct pe_rotor rt = {buf, buf + half, buf + 2 * half, buf + 3 * half, NAN};
#pragma omp for schedule(static)
        for (ptrdiff_t t = 0; t < ncells; ++t) {
            ptrdiff_t r0 = t * PE_ANCHOR;
            cell(ctx, &rt, r0, n_rows - r0 < PE_ANCHOR ? n_rows - r0 : PE_ANCHOR);
        }
    }
    free(scratch);
    return 0;
}
