/*
 * kernels_neon.c -- the NEON kernels against the portable ones, bit for
 * bit: every kernel the NEON table has a body of is run on the same inputs
 * through pe_kernels_scalar and pe_kernels_neon (each kernel directly, and
 * the entry points that use them), and the outputs compared as bytes.
 * Inputs: random values and random bit patterns (NaNs of both kinds and
 * signs, infinities, subnormals, float16 overflow, bfloat16 halfway
 * points), every dtype and layout, lengths 0 to past several vectors (tails
 * shorter than a vector), large positions.  Prints each difference and
 * exits non-zero if there is one.
 *
 * Built for AArch64 and run under qemu by run_neon.sh (it links the kernel
 * files, not the Python glue of src/module*.c).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arm_neon.h>

#include "bias.h"
#include "dot.h"
#include "half.h"
#include "pe.h"
#include "rope.h"
#include "simd.h"
#include "sincos.h"

#if !PE_ARM
#error "kernels_neon.c tests the NEON path: build it for AArch64 (tests/c/run_neon.sh)"
#endif

static const struct pe_kernels *const S = &pe_kernels_scalar, *const N = &pe_kernels_neon;
static const char *const DT[PE_NDTYPES] = {"float16", "float32", "float64", "bfloat16"};

static long failures, cases;

/* ---- random inputs ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t next_u64(void)
{
    /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1du;
}

static double uniform(void)
{
    return (double)(next_u64() >> 11) * 0x1p-53;
}

static double normal(void)
{
    double u = uniform() + 0x1p-60, v = uniform();
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* Special float32 bit patterns: NaNs quiet and signalling of both signs,
 * infinities, zeros, subnormals, float16's overflow edge and bfloat16's
 * halfway points. */
static const uint32_t SPECIAL32[] = {
    0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fa00000u, 0x7fbfffffu, 0x7fc12345u,
    0x7f800000u, 0xff800000u, 0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00400000u,
    0x477ff000u, 0x477fefffu, 0xc77ff000u, 0x38800000u, 0x387fffffu, 0x33000000u, 0x33000001u,
    0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7f7fffffu, 0x7f7f8000u, 0x3f7fffffu, 0xbf808000u,
};
#define NSPECIAL32 (sizeof SPECIAL32 / sizeof SPECIAL32[0])

static const uint64_t SPECIAL64[] = {
    0x7ff8000000000000u, 0xfff8000000000000u, 0x7ff0000000000001u, 0x7ff4000000000000u,
    0x7ff0000000000000u, 0xfff0000000000000u, 0x0000000000000000u, 0x8000000000000000u,
    0x0000000000000001u, 0x000fffffffffffffu, 0x7fefffffffffffffu, 0x3ff0000000000001u,
};
#define NSPECIAL64 (sizeof SPECIAL64 / sizeof SPECIAL64[0])

/* One element of dtype: a random value (scale times a normal one), now and
 * then a random bit pattern or a special value. */
static void random_element(char *p, int dtype, double scale, int specials)
{
    uint64_t r = next_u64() % 16;
    if (dtype == PE_F64) {
        double v = scale * normal();
        if (specials && r == 0)
            memcpy(&v, &SPECIAL64[next_u64() % NSPECIAL64], 8);
        else if (specials && r == 1) {
            uint64_t u = next_u64();
            memcpy(&v, &u, 8);
        }
        memcpy(p, &v, 8);
    } else if (dtype == PE_F32) {
        float v = (float)(scale * normal());
        if (specials && r == 0)
            memcpy(&v, &SPECIAL32[next_u64() % NSPECIAL32], 4);
        else if (specials && r == 1) {
            uint32_t u = (uint32_t)next_u64();
            memcpy(&v, &u, 4);
        }
        memcpy(p, &v, 4);
    } else {
        uint16_t h = pe_store16((float)(scale * normal()), dtype);
        if (specials && r < 3)
            h = (uint16_t)next_u64(); /* any bits: NaNs, infinities, subnormals */
        memcpy(p, &h, 2);
    }
}

/* n float32 (float64 for dtype PE_F64) values for the row kinds that read
 * float32: random, special, and halfway between two values of dtype. */
static void random_f32(char *p, ptrdiff_t n, int dtype, int specials)
{
    for (ptrdiff_t j = 0; j < n; ++j) {
        if (dtype == PE_F64) {
            random_element(p + 8 * j, PE_F64, 100.0, specials);
            continue;
        }
        random_element(p + 4 * j, PE_F32, 100.0, specials);
        if (dtype != PE_F32 && specials && next_u64() % 8 == 0) {
            /* a halfway point of dtype: its value and half an ulp */
            uint32_t u = (uint32_t)next_u64() & 0xbfffffffu;
            u = dtype == PE_BF16 ? (u & 0xffff0000u) | 0x8000u : (u & 0x8fffe000u) | 0x38001000u;
            memcpy(p + 4 * j, &u, 4);
        }
    }
}

/* ---- comparison ---- */

/* Whether element i of dtype at p is a NaN. */
static int is_nan(const unsigned char *p, size_t i, int dtype)
{
    if (dtype == PE_F64) {
        uint64_t u;
        memcpy(&u, p + 8 * i, 8);
        return (u & 0x7fffffffffffffffu) > 0x7ff0000000000000u;
    }
    if (dtype == PE_F32) {
        uint32_t u;
        memcpy(&u, p + 4 * i, 4);
        return (u & 0x7fffffffu) > 0x7f800000u;
    }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return (h & 0x7fffu) > (dtype == PE_BF16 ? 0x7f80u : 0x7c00u);
}

/* The bytes of the two outputs equal, element by element (elements of
 * dtype).  two_nans: the kernel adds two values that may both be NaN; then
 * which NaN comes out is the compiler's order of the operands (a + b or b
 * + a, on either path), and any NaN is accepted where both outputs are
 * NaN; everywhere else, and for every other kernel, the bits must match. */
static void compare_as(const char *what, const void *a, const void *b, size_t bytes, int dtype,
                       int two_nans)
{
    ++cases;
    if (memcmp(a, b, bytes) == 0)
        return;
    const unsigned char *x = a, *y = b;
    size_t esize = pe_itemsize(dtype);
    int shown = 0;
    for (size_t i = 0; i < bytes / esize; ++i) {
        if (memcmp(x + i * esize, y + i * esize, esize) == 0)
            continue;
        if (two_nans && is_nan(x, i, dtype) && is_nan(y, i, dtype))
            continue;
        if (shown++ == 0)
            ++failures;
        if (shown > 4)
            break;
        uint64_t u = 0, v = 0;
        memcpy(&u, x + i * esize, esize);
        memcpy(&v, y + i * esize, esize);
        printf("DIFF %s: element %zu: scalar %0*llx, neon %0*llx\n", what, i, (int)(2 * esize),
               (unsigned long long)u, (int)(2 * esize), (unsigned long long)v);
    }
}

static void compare(const char *what, const void *a, const void *b, size_t bytes, int dtype)
{
    compare_as(what, a, b, bytes, dtype, 0);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

static const ptrdiff_t LENGTHS[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 15, 16, 17, 31, 33, 64, 101};
#define NLENGTHS (sizeof LENGTHS / sizeof LENGTHS[0])

/* ---- row_add (every kind, every dtype) ---- */

static void test_row_add(void)
{
    static const char *const kinds[PE_ROW_NKINDS] = {"same", "sum", "product", "cast"};
    for (int kind = 0; kind < PE_ROW_NKINDS; ++kind)
        for (int dt = 0; dt < PE_NDTYPES; ++dt)
            for (size_t li = 0; li < NLENGTHS; ++li)
                for (int rep = 0; rep < 4; ++rep) {
                    ptrdiff_t n = LENGTHS[li];
                    size_t isz = pe_itemsize(dt);
                    size_t xsz = kind == PE_ROW_SAME || dt == PE_F64 ? isz : 4;
                    /* one element more on each side: nothing past the row is written */
                    char *o0 = xmalloc((size_t)(n + 2) * isz), *x = xmalloc((size_t)n * xsz);
                    char *os = xmalloc((size_t)(n + 2) * isz), *on = xmalloc((size_t)(n + 2) * isz);
                    for (ptrdiff_t j = 0; j < n + 2; ++j)
                        random_element(o0 + j * isz, dt, 10.0, 1);
                    if (kind == PE_ROW_SAME)
                        for (ptrdiff_t j = 0; j < n; ++j)
                            random_element(x + j * xsz, dt, 10.0, 1);
                    else
                        random_f32(x, n, dt, 1);
                    memcpy(os, o0, (size_t)(n + 2) * isz);
                    memcpy(on, o0, (size_t)(n + 2) * isz);
                    S->row_add[kind][dt](os + isz, x, n);
                    N->row_add[kind][dt](on + isz, x, n);
                    char what[96];
                    snprintf(what, sizeof what, "row_add %s %s n=%td", kinds[kind], DT[dt], n);
                    compare_as(what, os, on, (size_t)(n + 2) * isz, dt, kind != PE_ROW_CAST);
                    free(o0), free(x), free(os), free(on);
                }
}

/* ---- sincos_row and rotate_row ---- */

static void test_sincos_rows(void)
{
    static const double POS[] = {0.0,  1.0,      -3.0,      7.5,    1e3,        65535.0,  1e6,
                                 -1e9, 1e12,     1e15,      0x1p49, 0x1p50,     0x1.8p50, 1e300,
                                 NAN,  INFINITY, -INFINITY, 1e-300, 123456.789, -0.0};
    for (size_t pi = 0; pi < sizeof POS / sizeof POS[0]; ++pi)
        for (size_t li = 0; li < NLENGTHS; ++li) {
            ptrdiff_t n = LENGTHS[li];
            double *freq = xmalloc((size_t)n * 8), *buf = xmalloc((size_t)n * 8 * 4);
            for (ptrdiff_t i = 0; i < n; ++i)
                freq[i] = pow(10000.0, -(double)i / (double)(n ? n : 1)) * (1.0 + uniform());
            if (n > 3)
                freq[n - 1] = NAN, freq[n - 2] = 0.0, freq[1] = -freq[1];
            double *ss = buf, *cs = buf + n, *sn = buf + 2 * n, *cn = buf + 3 * n;
            S->sincos_row(POS[pi], freq, n, ss, cs);
            N->sincos_row(POS[pi], freq, n, sn, cn);
            char what[96];
            snprintf(what, sizeof what, "sincos_row pos=%g n=%td: sin", POS[pi], n);
            compare(what, ss, sn, (size_t)n * 8, PE_F64);
            snprintf(what, sizeof what, "sincos_row pos=%g n=%td: cos", POS[pi], n);
            compare(what, cs, cn, (size_t)n * 8, PE_F64);
            free(freq), free(buf);
        }
    /* random angles across the reduction's range */
    for (int rep = 0; rep < 200; ++rep) {
        enum { n = 37 };
        double freq[n], ss[n], cs[n], sn[n], cn[n];
        double pos = ldexp(normal(), (int)(next_u64() % 60));
        for (ptrdiff_t i = 0; i < n; ++i)
            freq[i] = ldexp(uniform(), -(int)(next_u64() % 30));
        S->sincos_row(pos, freq, n, ss, cs);
        N->sincos_row(pos, freq, n, sn, cn);
        compare("sincos_row random: sin", ss, sn, sizeof ss, PE_F64);
        compare("sincos_row random: cos", cs, cn, sizeof cs, PE_F64);
    }
    /* rotation: a row advanced by a step, some columns falling below the
     * floor (m large) and recomputed, some values NaN */
    for (size_t li = 0; li < NLENGTHS; ++li)
        for (int rep = 0; rep < 6; ++rep) {
            ptrdiff_t n = LENGTHS[li];
            double *freq = xmalloc((size_t)n * 8), *b = xmalloc((size_t)n * 8 * 6);
            double *s0 = b, *c0 = b + n, *sd = b + 2 * n, *cd = b + 3 * n, *ss = b + 4 * n,
                   *cs = b + 5 * n;
            double step = 1.0 + (double)(next_u64() % 4), pos = (double)(next_u64() % 100000);
            double m = rep < 3 ? pos * 0x1p-26 : ldexp(1.0, -(int)(next_u64() % 8));
            for (ptrdiff_t i = 0; i < n; ++i)
                freq[i] = pow(10000.0, -(double)i / (double)(n ? n : 1));
            S->sincos_row(pos - step, freq, n, s0, c0);
            S->sincos_row(step, freq, n, sd, cd);
            if (rep == 5 && n > 2)
                s0[n / 2] = NAN, c0[1] = INFINITY, sd[0] = -0.0;
            double *sn = xmalloc((size_t)n * 8 * 2), *cn = sn + n;
            memcpy(ss, s0, (size_t)n * 8), memcpy(cs, c0, (size_t)n * 8);
            memcpy(sn, s0, (size_t)n * 8), memcpy(cn, c0, (size_t)n * 8);
            S->rotate_row(ss, cs, sd, cd, freq, pos, m, n);
            N->rotate_row(sn, cn, sd, cd, freq, pos, m, n);
            char what[96];
            snprintf(what, sizeof what, "rotate_row n=%td rep %d: sin", n, rep);
            compare(what, ss, sn, (size_t)n * 8, PE_F64);
            snprintf(what, sizeof what, "rotate_row n=%td rep %d: cos", n, rep);
            compare(what, cs, cn, (size_t)n * 8, PE_F64);
            free(freq), free(b), free(sn);
        }
}

/* ---- rope_run: the kernels on random tables, and apply_rope ---- */

static void test_rope_run(void)
{
    static const ptrdiff_t HALVES[] = {1, 2, 3, 4, 5, 7, 8, 9, 12, 17, 33};
    static const char *const LAYOUT[PE_ROPE_NLAYOUTS] = {
        "half", "interleaved", "interleaved_to_half", "half_to_interleaved"};
    for (int layout = 0; layout < PE_ROPE_NLAYOUTS; ++layout)
        for (int dt = 0; dt < PE_NDTYPES; ++dt)
            for (size_t hi = 0; hi < sizeof HALVES / sizeof HALVES[0]; ++hi)
                for (int extra = 0; extra < 2; ++extra) {
                    ptrdiff_t half = HALVES[hi], dim = 2 * half + 3 * extra, rows = 3, lanes = 2;
                    size_t isz = pe_itemsize(dt), tsz = dt == PE_F64 ? 8 : 4;
                    size_t xbytes = (size_t)(rows * lanes * dim) * isz;
                    char *x = xmalloc(xbytes), *os = xmalloc(xbytes), *on = xmalloc(xbytes);
                    char *tab = xmalloc((size_t)(rows * 2 * half) * tsz);
                    for (ptrdiff_t j = 0; j < rows * lanes * dim; ++j)
                        random_element(x + (size_t)j * isz, dt, 3.0, 1);
                    /* the table: values, infinities, zeros, subnormals (no NaN:
                     * a NaN times a NaN x is the compiler's choice of operands) */
                    for (ptrdiff_t j = 0; j < rows * 2 * half; ++j) {
                        char *e = tab + (size_t)j * tsz;
                        random_element(e, dt == PE_F64 ? PE_F64 : PE_F32, 1.0, j % 7 == 3);
                        if (is_nan((const unsigned char *)e, 0, dt == PE_F64 ? PE_F64 : PE_F32))
                            memset(e, 0, tsz);
                    }
                    memset(os, 0xa5, xbytes), memset(on, 0xa5, xbytes);
                    struct pe_rope_run r = {.x = x,
                                            .tab = tab,
                                            .xs = lanes * dim * (ptrdiff_t)isz,
                                            .os = lanes * dim * (ptrdiff_t)isz,
                                            .ts = 2 * half * (ptrdiff_t)tsz,
                                            .n = rows,
                                            .lanes = lanes,
                                            .lxs = dim * (ptrdiff_t)isz,
                                            .los = dim * (ptrdiff_t)isz,
                                            .half = half,
                                            .dim = dim};
                    r.o = os;
                    S->rope_run[layout][dt](&r);
                    r.o = on;
                    N->rope_run[layout][dt](&r);
                    char what[128];
                    snprintf(what, sizeof what, "rope_run %s %s half=%td dim=%td", LAYOUT[layout],
                             DT[dt], half, dim);
                    compare(what, os, on, xbytes, dt);
                    if (layout <= PE_ROPE_INTERLEAVED) {
                        /* in place */
                        memcpy(os, x, xbytes), memcpy(on, x, xbytes);
                        r.x = os, r.o = os;
                        S->rope_run[layout][dt](&r);
                        r.x = on, r.o = on;
                        N->rope_run[layout][dt](&r);
                        snprintf(what, sizeof what, "rope_run in place %s %s half=%td",
                                 LAYOUT[layout], DT[dt], half);
                        compare(what, os, on, xbytes, dt);
                    }
                    free(x), free(os), free(on), free(tab);
                }
}

static void test_rope_apply(void)
{
    static const ptrdiff_t HALVES[] = {1, 3, 4, 8, 13, 32};
    static const double POS0[] = {0.0, 1000.0, 1e6, 3e9};
    for (int layout = 0; layout < PE_ROPE_NLAYOUTS; ++layout)
        for (int dt = 0; dt < PE_NDTYPES; ++dt)
            for (size_t hi = 0; hi < sizeof HALVES / sizeof HALVES[0]; ++hi)
                for (size_t p0 = 0; p0 < sizeof POS0 / sizeof POS0[0]; ++p0)
                    for (int inverse = 0; inverse < 2; ++inverse) {
                        ptrdiff_t half = HALVES[hi], dim = 2 * half + (hi % 2), heads = 3, seq = 40;
                        size_t isz = pe_itemsize(dt);
                        ptrdiff_t shape[2] = {heads, seq};
                        ptrdiff_t xst[2] = {seq * dim * (ptrdiff_t)isz, dim * (ptrdiff_t)isz};
                        /* positions along the sequence, shared by the heads
                         * (evenly spaced: the table rotated; or not) */
                        ptrdiff_t pst[2] = {0, 8};
                        double pos[40], freq[32];
                        for (ptrdiff_t t = 0; t < seq; ++t)
                            pos[t] = POS0[p0] + (inverse ? (double)(next_u64() % 5000) : (double)t);
                        for (ptrdiff_t i = 0; i < half; ++i)
                            freq[i] = pow(10000.0, -(double)i / (double)half);
                        size_t bytes = (size_t)(heads * seq * dim) * isz;
                        char *x = xmalloc(bytes), *os = xmalloc(bytes), *on = xmalloc(bytes);
                        for (ptrdiff_t j = 0; j < heads * seq * dim; ++j)
                            random_element(x + (size_t)j * isz, dt, 2.0, 1);
                        struct pe_rope_args a = {.ndim = 2,
                                                 .shape = shape,
                                                 .x = x,
                                                 .x_strides = xst,
                                                 .out_strides = xst,
                                                 .pos = (const char *)pos,
                                                 .pos_strides = pst,
                                                 .dim = dim,
                                                 .freq = freq,
                                                 .half = half,
                                                 .scale = inverse ? 1.0 : 0.75,
                                                 .inverse = inverse,
                                                 .layout = layout,
                                                 .dtype = dt};
                        a.out = os;
                        int rs = pe_rope_apply(S, &a, 1);
                        a.out = on;
                        int rn = pe_rope_apply(N, &a, 1);
                        char what[128];
                        snprintf(what, sizeof what,
                                 "rope_apply layout %d %s half=%td pos0=%g inv=%d", layout, DT[dt],
                                 half, POS0[p0], inverse);
                        if (rs != 0 || rn != 0) {
                            printf("FAIL %s: returned %d, %d\n", what, rs, rn);
                            ++failures;
                        } else {
                            compare(what, os, on, bytes, dt);
                        }
                        free(x), free(os), free(on);
                    }
}

/* ---- tables: sinusoid and rope_cos_sin (sincos_row, rotate_row) ---- */

static void test_tables(void)
{
    static const ptrdiff_t HALVES[] = {1, 2, 3, 5, 8, 16, 19};
    for (int dt = 0; dt < PE_NDTYPES; ++dt)
        for (int layout = 0; layout < 2; ++layout)
            for (size_t hi = 0; hi < sizeof HALVES / sizeof HALVES[0]; ++hi)
                for (int spaced = 0; spaced < 3; ++spaced) {
                    ptrdiff_t half = HALVES[hi], n = 100;
                    size_t isz = pe_itemsize(dt), row = (size_t)(2 * half) * isz;
                    double pos[100], freq[19];
                    for (ptrdiff_t r = 0; r < n; ++r)
                        pos[r] = spaced == 0   ? (double)r
                                 : spaced == 1 ? 5e5 + 3.0 * (double)r
                                               : 1e4 * uniform() - 5e3;
                    for (ptrdiff_t i = 0; i < half; ++i)
                        freq[i] = pow(10000.0, -2.0 * (double)i / (double)(2 * half));
                    char *ts = xmalloc(row * (size_t)n), *tn = xmalloc(row * (size_t)n);
                    char what[96];
                    int rs = pe_sinusoid(S, pos, n, freq, half, layout, dt, ts, (ptrdiff_t)row, 1);
                    int rn = pe_sinusoid(N, pos, n, freq, half, layout, dt, tn, (ptrdiff_t)row, 1);
                    snprintf(what, sizeof what, "sinusoid %s layout %d half=%td positions %d",
                             DT[dt], layout, half, spaced);
                    if (rs || rn)
                        printf("FAIL %s: returned %d, %d\n", what, rs, rn), ++failures;
                    else
                        compare(what, ts, tn, row * (size_t)n, dt);
                    char *cs = xmalloc(row * (size_t)n), *cn = xmalloc(row * (size_t)n);
                    rs = pe_rope_table(S, pos, n, freq, half, 1.0, layout, dt, cs, (ptrdiff_t)row,
                                       ts, (ptrdiff_t)row, NULL, 0, NULL, 1, 1);
                    rn = pe_rope_table(N, pos, n, freq, half, 1.0, layout, dt, cn, (ptrdiff_t)row,
                                       tn, (ptrdiff_t)row, NULL, 0, NULL, 1, 1);
                    snprintf(what, sizeof what, "rope_table %s layout %d half=%td positions %d",
                             DT[dt], layout, half, spaced);
                    if (rs || rn)
                        printf("FAIL %s: returned %d, %d\n", what, rs, rn), ++failures;
                    else {
                        compare(what, cs, cn, row * (size_t)n, dt);
                        compare(what, ts, tn, row * (size_t)n, dt);
                    }
                    free(ts), free(tn), free(cs), free(cn);
                }
}

/* ---- biases added into scores (bias_rows, row_add) ---- */

static void test_bias(void)
{
    static const ptrdiff_t KLEN[] = {1, 3, 4, 7, 9, 16, 37};
    for (int dt = 0; dt < PE_NDTYPES; ++dt)
        for (size_t ki = 0; ki < sizeof KLEN / sizeof KLEN[0]; ++ki)
            for (int causal = 0; causal < 2; ++causal) {
                ptrdiff_t b = 2, h = 3, q = 5, k = KLEN[ki];
                size_t isz = pe_itemsize(dt), bytes = (size_t)(b * h * q * k) * isz;
                char *s0 = xmalloc(bytes), *ss = xmalloc(bytes), *sn = xmalloc(bytes);
                for (ptrdiff_t j = 0; j < b * h * q * k; ++j)
                    random_element(s0 + (size_t)j * isz, dt, 4.0, 1);
                double slopes[3] = {0.5, 0.0625, 0x1p-7};
                struct pe_bias_dst d = {.batch = b,
                                        .heads = h,
                                        .q_len = q,
                                        .k_len = k,
                                        .stride_b = h * q * k * (ptrdiff_t)isz,
                                        .stride_h = q * k * (ptrdiff_t)isz,
                                        .stride_q = k * (ptrdiff_t)isz,
                                        .dtype = dt};
                for (int add = 0; add < 2; ++add) {
                    memcpy(ss, s0, bytes), memcpy(sn, s0, bytes);
                    d.data = ss;
                    int rs = pe_alibi(S, slopes, causal, 2, &d, add, 1);
                    d.data = sn;
                    int rn = pe_alibi(N, slopes, causal, 2, &d, add, 1);
                    char what[96];
                    snprintf(what, sizeof what, "alibi %s k=%td causal=%d add=%d", DT[dt], k,
                             causal, add);
                    if (rs || rn)
                        printf("FAIL %s: returned %d, %d\n", what, rs, rn), ++failures;
                    else
                        compare_as(what, ss, sn, bytes, dt, 1);
                }
                /* T5: a table of random values (NaNs among them) */
                ptrdiff_t nb = 8;
                int64_t thresh[] = {4, 6, 9, 13};
                char *table = xmalloc((size_t)(nb * h) * isz);
                for (ptrdiff_t j = 0; j < nb * h; ++j)
                    random_element(table + (size_t)j * isz, dt, 2.0, 1);
                memcpy(ss, s0, bytes), memcpy(sn, s0, bytes);
                d.data = ss;
                int rs = pe_t5_bias(S, table, dt, nb, causal, thresh, 4, 0, &d, 1, 1);
                d.data = sn;
                int rn = pe_t5_bias(N, table, dt, nb, causal, thresh, 4, 0, &d, 1, 1);
                char what[96];
                snprintf(what, sizeof what, "t5_bias add %s k=%td bidirectional=%d", DT[dt], k,
                         causal);
                if (rs || rn)
                    printf("FAIL %s: returned %d, %d\n", what, rs, rn), ++failures;
                else
                    compare_as(what, ss, sn, bytes, dt, 1);
                free(s0), free(ss), free(sn), free(table);
            }
}

/* ---- the cast (row_add's PE_ROW_CAST through pe_cast) ---- */

static void test_cast(void)
{
    for (int dt = 0; dt < PE_NDTYPES; ++dt) {
        ptrdiff_t n = 40000; /* past one block of pe_cast */
        size_t isz = pe_itemsize(dt), xsz = dt == PE_F64 ? 8 : 4;
        char *x = xmalloc((size_t)n * xsz), *os = xmalloc((size_t)n * isz),
             *on = xmalloc((size_t)n * isz);
        random_f32(x, n, dt, 1);
        pe_cast(S, x, os, n, dt, 1);
        pe_cast(N, x, on, n, dt, 1);
        char what[64];
        snprintf(what, sizeof what, "cast %s", DT[dt]);
        compare(what, os, on, (size_t)n * isz, dt);
        free(x), free(os), free(on);
    }
    /* every float32 exponent and top mantissa bits, with random low bits,
     * to float16 and bfloat16 */
    enum { n = 1 << 16 };
    uint32_t *x = xmalloc(sizeof(uint32_t) * n);
    uint16_t *os = xmalloc(2 * n), *on = xmalloc(2 * n);
    for (uint32_t j = 0; j < n; ++j)
        x[j] = j << 16 | ((uint32_t)next_u64() & 0xffffu);
    for (int dt = 0; dt < PE_NDTYPES; dt += 3) { /* PE_F16, PE_BF16 */
        pe_cast(S, (const char *)x, (char *)os, n, dt, 1);
        pe_cast(N, (const char *)x, (char *)on, n, dt, 1);
        compare(dt == PE_F16 ? "cast float16: every exponent" : "cast bfloat16: every exponent", os,
                on, 2 * n, dt);
    }
    free(x), free(os), free(on);
}

/* ---- float64 to float32 rounded to odd: FCVTXN (the NEON sinusoid's
 * float16 and bfloat16 stores) against half.h's pe_f32_round_odd ---- */

static void test_round_odd(void)
{
    enum { n = 1 << 16 };
    double *d = xmalloc(8 * n);
    float *fs = xmalloc(4 * n), *fn = xmalloc(4 * n);
    for (size_t i = 0; i < n; ++i) {
        uint64_t u = next_u64();
        if (i % 4 == 1) /* float32's range, subnormals and overflow included */
            u = (u & 0x800fffffffffffffu) | (uint64_t)(0x360 + u % 0x120) << 52;
        else if (i % 4 == 2) /* exactly a float32, or half-way between two */
            u &= 0xffffffffe0000000u | (uint64_t)(u & 1) << 28;
        else if (i % 4 == 3)
            u = SPECIAL64[u % NSPECIAL64];
        memcpy(&d[i], &u, 8);
    }
    for (size_t i = 0; i < n; ++i)
        fs[i] = pe_f32_round_odd(d[i]);
    for (size_t i = 0; i < n; i += 2)
        vst1_f32(fn + i, vcvtx_f32_f64(vld1q_f64(d + i)));
    compare("float64 to float32 rounded to odd", fs, fn, 4 * n, PE_F32);
    free(d), free(fs), free(fn);
}

/* ---- the products of bfloat16 vectors (dot.h): the path the NEON table
 * takes (the portable one, its plain rows in vector FMAs) against each sum
 * made one addition at a time by pe_bf16_fma ---- */

/* A bfloat16: plain (0, infinite or NaN, or of magnitude 2**-50 or more,
 * mostly near 1), or not: mostly from low + 0 to low + 24 as its exponent
 * field, whose products with the other operand's, from 100 to 124, make
 * sums near and among the subnormals. */
static uint16_t random_bf16(int plain, int low)
{
    uint64_t u = next_u64();
    uint16_t sign = (uint16_t)(u & 0x8000u), mant = (uint16_t)((u >> 16) & 0x7Fu);
    int kind = (int)((u >> 24) % 16);
    if (kind == 0)
        return sign; /* a zero */
    if (kind == 1)
        return (uint16_t)(sign | 0x7F80u | (plain ? 0 : mant)); /* an infinity, or a NaN */
    if (kind == 2) /* the least plain exponent, and the one below */
        return (uint16_t)(sign | (uint16_t)(plain ? 77 : 76) << 7 | mant);
    if (!plain)
        return (uint16_t)(sign | (uint16_t)(low + (u >> 32) % 25) << 7 | mant);
    return (uint16_t)(sign | (uint16_t)(120 + (u >> 32) % 14) << 7 | mant);
}

static void test_bf16_products(void)
{
    enum { heads = 2, m = 13, n = 37, d = 6 };
    for (int plain = 0; plain < 2; ++plain) {
        uint16_t *a = xmalloc(2 * heads * m * d), *b = xmalloc(2 * heads * n * d);
        float *c = xmalloc(4 * heads * m * n), *want = xmalloc(4 * heads * m * n);
        float *init = xmalloc(4 * heads * n);
        for (int i = 0; i < heads * m * d; ++i)
            a[i] = random_bf16(plain, 0);
        for (int i = 0; i < heads * n * d; ++i)
            b[i] = random_bf16(plain, 100);
        for (int i = 0; i < heads * n; ++i)
            init[i] = pe_f32_from_bf16(random_bf16(plain, 0)) * 3.0f;
        for (int with_init = 0; with_init < 2; ++with_init) {
            struct pe_bf16_gemm g = {
                a, m * d, d, b, n * d, d,   c, m * n, n, with_init ? init : NULL,
                n, heads, m, n, d,     NULL};
            if (pe_bf16_products(N, &g, NULL, 1) != 0) {
                printf("FAIL: bf16 products out of memory\n");
                ++failures;
            }
            for (int h = 0; h < heads; ++h)
                for (int i = 0; i < m; ++i)
                    for (int j = 0; j < n; ++j) {
                        const uint16_t *x = a + (h * m + i) * d, *y = b + (h * n + j) * d;
                        float s = with_init ? pe_f32_daz(init[h * n + j]) : 0.0f;
                        for (int p = 0; p < d; p += 2) {
                            s = pe_bf16_fma(s, pe_bf16_daz(x[p + 1]), pe_bf16_daz(y[p + 1]));
                            s = pe_bf16_fma(s, pe_bf16_daz(x[p]), pe_bf16_daz(y[p]));
                        }
                        want[(h * m + i) * n + j] = pe_dot_canonical(s);
                    }
            compare(plain ? "bf16 products, plain rows" : "bf16 products, near subnormals", want, c,
                    4 * heads * m * n, PE_F32);
        }
        free(a), free(b), free(c), free(want), free(init);
    }
}

int main(void)
{
    if (pe_kernels_for(pe_simd_cpu_best()) != N || pe_kernels_for(PE_SIMD_NEON) != N) {
        printf("FAIL: the NEON path is not the best one on this CPU\n");
        return 1;
    }
    test_row_add();
    test_sincos_rows();
    test_rope_run();
    test_rope_apply();
    test_tables();
    test_bias();
    test_cast();
    test_round_odd();
    test_bf16_products();
    printf("%ld cases, %ld differ\n", cases, failures);
    return failures != 0;
}
