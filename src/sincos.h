/*
 * sincos.h -- sine and cosine of a float64 angle, both at once, as inline
 * functions for the kernels that make tables (sinusoid, RoPE), the rotation
 * of a row of them to the next, and the groups of rows made by rotation
 * (sincos.c).  The same steps on four doubles, for the AVX2 kernels, are in
 * avx2.h.
 *
 * Precision: the angle (a float64 product pos * freq) is reduced by
 * n * pi/2 with pi/2 split into three doubles and FMA: the first step is
 * exact (both terms are multiples of 2**-53 and the difference is below 1),
 * so the remainder carries ~1 ulp of error for any angle below 2**50 (far
 * past 2**24 positions).  The
 * polynomials on [-pi/4, pi/4] are the classic minimax ones (error below
 * 2**-58).  The results are within ~1.5 ulp of sin and cos of the float64
 * angle, so float32 values rounded from them are within 1 ulp of it.
 *
 * The scalar functions are written with fma() in the order of the vector
 * ones (pe_sincos4, pe_rotate4 in avx2.h), so both paths give the same
 * bits.
 */
#ifndef PE_SINCOS_H
#define PE_SINCOS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "simd.h"

#define PE_2_OVER_PI 0x1.45f306dc9c883p-1
#define PE_PIO2_1 0x1.921fb54442d18p+0
#define PE_PIO2_2 0x1.1a62633145c07p-54
#define PE_PIO2_3 -0x1.f1976b7ed8fbcp-110
/* 1.5 * 2**52: adding it puts an integer-valued double's low bits, in two's
 * complement, in the low bits of the mantissa. */
#define PE_ROUND_MAGIC 0x1.8p52

static const double PE_S1 = -1.66666666666666324348e-01, PE_S2 = 8.33333333332248946124e-03,
                    PE_S3 = -1.98412698298579493134e-04, PE_S4 = 2.75573137070700676789e-06,
                    PE_S5 = -2.50507602534068634195e-08, PE_S6 = 1.58969099521155010221e-10;
static const double PE_C1 = 4.16666666666666019037e-02, PE_C2 = -1.38888888888741095749e-03,
                    PE_C3 = 2.48015872894767294178e-05, PE_C4 = -2.75573143513906633035e-07,
                    PE_C5 = 2.08757232129817482790e-09, PE_C6 = -1.13596475577881948265e-11;

/* Below this the reduction is exact and the quadrant trick holds.  Larger
 * angles (positions past 10**15 or so, or a non-finite angle) go to the C
 * library's sin and cos, which reduce any argument correctly. */
#define PE_REDUCE_MAX 0x1p50

static inline void pe_sincos1(double x, double *sp, double *cp)
{
    if (!(fabs(x) < PE_REDUCE_MAX)) {
        *sp = sin(x);
        *cp = cos(x);
        return;
    }
    double n = nearbyint(x * PE_2_OVER_PI);
    double r = fma(-n, PE_PIO2_1, x);
    r = fma(-n, PE_PIO2_2, r);
    r = fma(-n, PE_PIO2_3, r);

    double z = r * r;
    double ps = fma(z, fma(z, fma(z, fma(z, fma(z, PE_S6, PE_S5), PE_S4), PE_S3), PE_S2), PE_S1);
    double s = fma(r * z, ps, r);
    double pc = fma(z, fma(z, fma(z, fma(z, fma(z, PE_C6, PE_C5), PE_C4), PE_C3), PE_C2), PE_C1);
    pc = (z * z) * pc;
    double hz = 0.5 * z, w = 1.0 - hz;
    double c = w + (((1.0 - w) - hz) + pc);

    /* quadrant from the low two bits of n */
    union {
        double d;
        uint64_t u;
    } q = {n + PE_ROUND_MAGIC};
    unsigned quad = (unsigned)(q.u & 3u);
    double sv = (quad & 1u) ? c : s, cv = (quad & 1u) ? s : c;
    *sp = (quad & 2u) ? -sv : sv;
    *cp = ((quad + 1u) & 2u) ? -cv : cv;
}

/* ---- rotation of a row from the previous one (the anchor grid) ----
 *
 * (s, c) at angle a becomes (s, c) at a + d, given sd, cd = sin, cos of d:
 * one product and one FMA each, in the same order on both paths (so the
 * same bits).  A result below floor = m * w + 2**-20 (m: M 2**-26 for the
 * largest |position| M of the group, w: the frequency) carries too large a
 * relative error for a float32 ulp and is recomputed from the angle pos * w
 * directly.  These two (and pe_rotate4, their four-lane twin in avx2.h) are
 * the only definition of that arithmetic: the kernels' rotate_row and
 * sinusoid's cells call them. */

static inline void pe_rotate1(double *s, double *c, double sd, double cd, double w, double m,
                              double pos)
{
    double s0 = *s, c0 = *c, floor = m * w + 0x1p-20;
    double s1 = fma(s0, cd, c0 * sd), c1 = fma(c0, cd, -(s0 * sd));
    if (fabs(s1) < floor || fabs(c1) < floor)
        pe_sincos1(pos * w, &s1, &c1);
    *s = s1;
    *c = c1;
}

/* ---- groups of rows (sincos.c) ---- */

/* Tables made by rotation (sinusoid, RoPE) compute every PE_ANCHOR-th
 * row exactly and rotate the rows between. */
#define PE_ANCHOR 32

/* The rows themselves are the kernels' sincos_row and rotate_row (simd.h):
 *
 * sincos_row: s[i] = sin(pos * freq[i]), c[i] = cos(pos * freq[i]) for
 * i < n, the angle the float64 product (pe_sincos1 on each).
 *
 * rotate_row: advances a row of (s[i], c[i]) = sin, cos of some angle a_i
 * to a_i + d_i = pos * freq[i], given sd[i], cd[i] = sin, cos of d_i
 * (pe_rotate1 on each). */

/* A group of rows of sin and cos made by pe_sincos_group: the rows of one
 * cell of the anchor grid (PE_ANCHOR consecutive indices along the axis the
 * positions vary on, counted from index 0 of the caller's array, never from
 * a tile or a thread's share), so that which rows are rotated, and their
 * bits, do not depend on tiling, threads or memory layout. */
struct pe_rotor {
    double *s, *c;   /* the current row (half each) */
    double *sd, *cd; /* sin and cos of the step last rotated by (half each) */
    double step;     /* that step; NaN: none yet */
};

/* Called with each row of a group, in order: j its index in the group. */
typedef void (*pe_row_fn)(void *ctx, ptrdiff_t j, const double *s, const double *c);

/* Rows j < n of sin and cos of pos_j * freq[i] (pos_j the double at pos + j
 * * stride bytes), made by k's rows and handed to emit one after the other.
 * If rotate is set, the positions are an exact arithmetic progression
 * (pe_progression), n > 2 and M wmax 2**-26 <= PE_ROTATE_MAX (M the largest
 * |pos_j|, wmax the largest freq[i]), row 0 is computed directly and the
 * others by rotation with the floor of pe_rotate1 at m = M 2**-26: within
 * half a float32 ulp of the direct values before rounding, so float32 and
 * float16 tables stay within 1 ulp.  Otherwise every row is direct
 * (float64 tables ask for that). */
void pe_sincos_group(const struct pe_kernels *k, struct pe_rotor *rt, const char *pos,
                     ptrdiff_t stride, ptrdiff_t n, const double *freq, ptrdiff_t half, double wmax,
                     int rotate, pe_row_fn emit, void *ctx);

/* Whether the rows of such a group are rotated (the test pe_sincos_group
 * applies), with *m = M 2**-26 then and rt->sd, rt->cd holding sin and cos
 * of the step (made by row).  For kernels that fuse the rotation with their
 * stores (sinusoid's cells). */
int pe_group_rotates(pe_sincos_row_fn row, struct pe_rotor *rt, const char *pos, ptrdiff_t stride,
                     ptrdiff_t n, const double *freq, ptrdiff_t half, double wmax, int rotate,
                     double *m);

/* Called with each cell of the anchor grid: rows [r0, r0 + n), n <= PE_ANCHOR,
 * and the calling thread's rotor. */
typedef void (*pe_cell_fn)(void *ctx, struct pe_rotor *rt, ptrdiff_t r0, ptrdiff_t n);

/* The table of n_rows rows of 2 * half values made cell by cell: cells are
 * shared among nthreads OpenMP threads when parallel is set, each with a
 * rotor of its own; a cell is never split, so the bits do not depend on the
 * thread count.  Returns -1 when the rotors cannot be allocated. */
int pe_for_each_cell(ptrdiff_t n_rows, ptrdiff_t half, int parallel, int nthreads, pe_cell_fn cell,
                     void *ctx);

/* Rotation is not used once M * max(w) * 2**-26 passes this: too many values
 * would fall below the floor and be recomputed. */
#define PE_ROTATE_MAX 0x1p-4

/* The largest |freq[i]|, i < n. */
static inline double pe_max_abs(const double *freq, ptrdiff_t n)
{
    double m = 0.0;
    for (ptrdiff_t i = 0; i < n; ++i)
        m = (freq[i] > m ? freq[i] : -freq[i] > m ? -freq[i] : m);
    return m;
}

/* Whether the n doubles at p, p + stride, ... (bytes) are an arithmetic
 * progression whose every difference is exact (its rounding error, by
 * Knuth's two-sum, is zero), so that stepping by the difference lands on
 * each value exactly; the difference goes to *step. */
static inline int pe_progression(const char *p, ptrdiff_t stride, ptrdiff_t n, double *step)
{
    if (n < 2)
        return 0;
    double prev = *(const double *)p, d = *(const double *)(p + stride) - prev;
    for (ptrdiff_t r = 1; r < n; ++r) {
        double a = *(const double *)(p + r * stride), b = -prev, sum = a + b;
        double a1 = sum - b, b1 = sum - a1;
        if (sum != d || (a - a1) + (b - b1) != 0.0)
            return 0;
        prev = a;
    }
    *step = d;
    return 1;
}

#endif
