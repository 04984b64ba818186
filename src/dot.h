/*
 * dot.h -- products of bfloat16 vectors as AVX-512 BF16's VDPBF16PS forms
 * them, on every path: c[h, m, n] = a[h, m, :] . b[h, n, :] in float32.
 *
 * The sum of a pair of columns is two additions into a float32 sum that
 * starts at +0: the pair's second product first, then its first, each
 * product exact (two bfloat16 significands fit in float32's), each
 * addition rounded once to nearest even; the pairs in order from the
 * first.  Subnormal inputs count as zero (of their sign), and a sum whose
 * rounded value (to float32's precision, its exponent unbounded) is below
 * float32's smallest normal becomes a zero of its sign: the instruction's
 * DAZ and FTZ, which MXCSR's FTZ and DAZ bits give the AVX2 path's FMAs
 * the same way (x86 detects a tiny result after rounding).  A NaN result
 * is the quiet NaN 0x7FC00000, whatever its payload was.  The depth d is
 * even (posenc pads an odd one with a zero column).
 *
 * pe_bf16_fma is the portable body of one addition, in double: the exact
 * product plus the sum, rounded to 53 bits, then to 24 -- the same value
 * as one rounding, 53 >= 2 * 24 + 2 -- with the tiny case rounded apart.
 */
#ifndef PE_DOT_H
#define PE_DOT_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pe.h"
#include "simd.h"

/* The products of one call: for h < heads, m < m_len, n < n_len,
 * c[h * c_head + m * c_row + n] = the dot product of a's row m and b's row
 * n of head h (d elements each, contiguous), its sum starting at +0, or at
 * init[h * init_head + n] where init is not NULL (a bias's products, the
 * pairs of a then added into them; a subnormal start counts as zero).
 * Strides in elements; b_head and init_head may be 0 (one for every
 * head). */
struct pe_bf16_gemm {
    const uint16_t *a;
    ptrdiff_t a_head, a_row;
    const uint16_t *b;
    ptrdiff_t b_head, b_row;
    float *c;
    ptrdiff_t c_head, c_row;
    const float *init;
    ptrdiff_t init_head;
    ptrdiff_t heads, m_len, n_len, d;
    /* where not NULL: the columns each group of PE_BF16_GROUP rows reads
     * (pe_bf16_products makes it from a gather's map), columns [band[2 g],
     * band[2 g + 1]) for group g; the products past them are written 0 */
    const ptrdiff_t *band;
};

/* Rows of a group of the band (a multiple of every path's tile of rows,
 * and a divisor of the rows of a task). */
#define PE_BF16_GROUP 8

/* The map of a gather the products are made for (relative.h): row m of
 * the products reads map[s + t], t < other, s = m_len - 1 - m (by query)
 * or m (by key); -1 reads nothing. */
struct pe_bf16_map {
    const int64_t *map;
    ptrdiff_t other;
    int by_key;
};

/* The quiet NaN every NaN product becomes. */
#define PE_DOT_NAN 0x7FC00000u

/* The float32 value of bfloat16 bits u, a subnormal counted as a zero of
 * its sign (the instruction's DAZ). */
static inline float pe_bf16_daz(uint16_t u)
{
    uint32_t w = (u & 0x7F80u) ? (uint32_t)u << 16 : (uint32_t)(u & 0x8000u) << 16;
    float f;
    memcpy(&f, &w, sizeof f);
    return f;
}

/* The float32 v, a subnormal counted as a zero of its sign. */
static inline float pe_f32_daz(float v)
{
    return fabsf(v) < 0x1p-126f ? copysignf(0.0f, v) : v;
}

/* s + a * b as one addition of the instruction: a and b normal or zero
 * (pe_bf16_daz), s normal or zero; the result rounded once, flushed to a
 * zero of its sign when tiny. */
static inline float pe_bf16_fma(float s, float a, float b)
{
    double r = (double)s + (double)a * (double)b;
    if (!(fabs(r) < 0x1p-126))
        return (float)r;           /* normal, infinite or NaN */
    float t = (float)(r * 0x1p64); /* rounded as if the exponent were unbounded */
    return fabsf(t) < 0x1p-62f ? copysignf(0.0f, t) : copysignf(0x1p-126f, t);
}

/* v, or the quiet NaN PE_DOT_NAN if v is a NaN. */
static inline float pe_dot_canonical(float v)
{
    if (v == v)
        return v;
    uint32_t w = PE_DOT_NAN;
    memcpy(&v, &w, sizeof v);
    return v;
}

/* The bytes of one thread's scratch for rows of n_len products of depth
 * d: b of one head laid out for the vector paths. */
size_t pe_bf16_pack_bytes(ptrdiff_t n_len, ptrdiff_t d);

/* The columns [*lo, *hi) rows [m, m + rows) of g read (all without a
 * band), *lo rounded down and *hi up to a multiple of `panel` (at most
 * n_len); *lo == *hi where they read none. */
static inline void pe_bf16_columns(const struct pe_bf16_gemm *g, ptrdiff_t m, ptrdiff_t panel,
                                   ptrdiff_t *lo, ptrdiff_t *hi)
{
    if (g->band == NULL) {
        *lo = 0;
        *hi = g->n_len;
        return;
    }
    const ptrdiff_t *b = g->band + 2 * (m / PE_BF16_GROUP);
    *lo = b[0] / panel * panel;
    *hi = (b[1] + panel - 1) / panel * panel;
    *hi = *hi < g->n_len ? *hi : g->n_len;
    if (b[0] >= b[1])
        *lo = *hi = 0;
}

/* Columns [0, lo) and [hi, n_len) of `rows` rows of products at c, c_row
 * apart, set to 0. */
static inline void pe_bf16_zero_outside(float *c, ptrdiff_t c_row, ptrdiff_t rows, ptrdiff_t lo,
                                        ptrdiff_t hi, ptrdiff_t n_len)
{
    for (ptrdiff_t r = 0; r < rows; ++r) {
        if (lo > 0)
            memset(c + r * c_row, 0, (size_t)lo * sizeof *c);
        if (hi < n_len)
            memset(c + r * c_row + hi, 0, (size_t)(n_len - hi) * sizeof *c);
    }
}

/* The products of g on the path of k, on nthreads threads; with map (not
 * NULL), only those of the columns the gather through it reads (others
 * 0).  0, or -1 if memory ran out. */
int pe_bf16_products(const struct pe_kernels *k, const struct pe_bf16_gemm *g,
                     const struct pe_bf16_map *map, int nthreads);

#endif
