/*
 * dot.c -- the products of bfloat16 vectors (dot.h): the portable path
 * (plain float32 additions where they are the instruction's, else one
 * addition at a time by pe_bf16_fma), and the entry point,
 * which splits the rows of every head into tasks for the team.  Each
 * thread lays out b for the head it works on in its own scratch, once per
 * head it meets (the vector paths read b in panels of columns).
 */
#include "dot.h"

#include <stdlib.h>

/* Rows of products a task makes. */
#define ROWS_PER_TASK 64

size_t pe_bf16_pack_bytes(ptrdiff_t n_len, ptrdiff_t d)
{
    /* b widened to float32 in panels of 32 columns (the AVX2 path; the
     * AVX-512 BF16 one takes half; the portable one, columns rounded up to
     * 16, and a flag), then 16 rows of a widened */
    size_t cols = (size_t)(n_len + 31) / 32 * 32;
    return (cols * (size_t)d + 16 * (size_t)d) * sizeof(float) + 64;
}

/* ---- the portable path ----
 *
 * Where no sum can come near the subnormals, the instruction's additions
 * are IEEE's: every nonzero input of magnitude 2**-50 or more (a bfloat16
 * exponent field of 77 or more; infinities and NaNs too) and every start 0
 * or of magnitude 2**-91 or more make every product and every start a
 * multiple of 2**-114, and so every sum, rounded or not: a nonzero one is
 * 2**-114 or more, never tiny, nothing flushed.  Those rows are made with
 * plain float32 additions of exact products (fmaf where it is one
 * instruction, else in double, rounded twice: the same value, 53 >= 2 *
 * 24 + 2), four rows by 16 columns at a time, a loop the compilers make
 * into vector code; any other row one addition at a time by pe_bf16_fma. */

/* Columns of a tile of the portable path, and the rows of b laid out. */
#define TILE 16

#if defined(FP_FAST_FMAF)
#define PLAIN_FMA(a, b, s) fmaf(a, b, s)
#else
#define PLAIN_FMA(a, b, s) ((float)((double)(s) + (double)(a) * (double)(b)))
#endif

/* Whether the n bfloat16 values at x are 0 or of magnitude 2**-50 or more. */
static int plain_bf16(const uint16_t *x, ptrdiff_t n)
{
    int plain = 1;
    for (ptrdiff_t i = 0; i < n; ++i)
        plain &= (x[i] & 0x7FFF) == 0 || ((x[i] >> 7) & 0xFF) >= 77;
    return plain;
}

/* Whether the n starts at x are 0 or of magnitude 2**-91 or more (or NaN). */
static int plain_f32(const float *x, ptrdiff_t n)
{
    int plain = 1;
    for (ptrdiff_t i = 0; i < n; ++i)
        plain &= x[i] == 0.0f || !(fabsf(x[i]) < 0x1p-91f);
    return plain;
}

/* b of one head into bt (element p of column n at bt[p * stride + n],
 * stride the columns rounded up to TILE, zeros past n_len); returns
 * whether its values are all plain. */
static int pack_portable(const struct pe_bf16_gemm *g, const uint16_t *b, float *bt,
                         ptrdiff_t stride)
{
    int plain = 1;
    for (ptrdiff_t n = 0; n < stride; ++n) {
        const uint16_t *y = b + n * g->b_row;
        if (n < g->n_len)
            plain &= plain_bf16(y, g->d);
        for (ptrdiff_t p = 0; p < g->d; ++p)
            bt[p * stride + n] = n < g->n_len ? pe_bf16_daz(y[p]) : 0.0f;
    }
    return plain;
}

/* Rows [m, m + R) (a at x, a_row apart, plain) by columns [n0, n0 + cols)
 * of bt, stored at c + n0, rows c_row apart. */
static void plain_tile(const uint16_t *x, ptrdiff_t a_row, const float *bt, ptrdiff_t stride,
                       ptrdiff_t d, const float *init, float *c, ptrdiff_t c_row, ptrdiff_t n0,
                       ptrdiff_t cols, int R)
{
    float acc[4][TILE];
    for (int r = 0; r < 4; ++r)
        for (int j = 0; j < TILE; ++j)
            acc[r][j] = init != NULL && j < cols ? init[n0 + j] : 0.0f;
    for (ptrdiff_t p = 0; p < d; p += 2) {
        const float *odd = bt + (p + 1) * stride + n0, *even = bt + p * stride + n0;
        for (int r = 0; r < 4; ++r) {
            float ao = pe_bf16_daz(x[(r < R ? r : 0) * a_row + p + 1]);
            for (int j = 0; j < TILE; ++j)
                acc[r][j] = PLAIN_FMA(ao, odd[j], acc[r][j]);
        }
        for (int r = 0; r < 4; ++r) {
            float ae = pe_bf16_daz(x[(r < R ? r : 0) * a_row + p]);
            for (int j = 0; j < TILE; ++j)
                acc[r][j] = PLAIN_FMA(ae, even[j], acc[r][j]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (ptrdiff_t j = 0; j < cols; ++j)
            c[r * c_row + n0 + j] = pe_dot_canonical(acc[r][j]);
}

void pe_bf16_rows_scalar(const struct pe_bf16_gemm *g, ptrdiff_t h, ptrdiff_t m0, ptrdiff_t m1,
                         void *pack, int pack_now)
{
    const uint16_t *a = g->a + h * g->a_head, *b = g->b + h * g->b_head;
    float *c = g->c + h * g->c_head;
    const float *init = g->init != NULL ? g->init + h * g->init_head : NULL;
    ptrdiff_t stride = (g->n_len + TILE - 1) / TILE * TILE;
    float *bt = pack;
    int *plain_b = (int *)(bt + stride * g->d); /* whether b is plain, kept with it */
    if (pack_now)
        *plain_b = pack_portable(g, b, bt, stride);
    int plain_start = init == NULL || plain_f32(init, g->n_len);
    for (ptrdiff_t m = m0; m < m1; m += 4) {
        int R = m1 - m < 4 ? (int)(m1 - m) : 4;
        const uint16_t *x = a + m * g->a_row;
        float *cm = c + m * g->c_row;
        ptrdiff_t lo, hi;
        pe_bf16_columns(g, m, 1, &lo, &hi);
        pe_bf16_zero_outside(cm, g->c_row, R, lo, hi, g->n_len);
        int plain = *plain_b && plain_start;
        for (int r = 0; r < R; ++r)
            plain = plain && plain_bf16(x + r * g->a_row, g->d);
        if (plain) {
            for (ptrdiff_t n0 = lo; n0 < hi; n0 += TILE) {
                ptrdiff_t cols = hi - n0 < TILE ? hi - n0 : TILE;
                plain_tile(x, g->a_row, bt, stride, g->d, init, cm, g->c_row, n0, cols, R);
            }
            continue;
        }
        for (int r = 0; r < R; ++r) /* one addition at a time */
            for (ptrdiff_t n = lo; n < hi; ++n) {
                const uint16_t *xr = x + r * g->a_row, *y = b + n * g->b_row;
                float s = init != NULL ? pe_f32_daz(init[n]) : 0.0f;
                for (ptrdiff_t p = 0; p < g->d; p += 2) {
                    s = pe_bf16_fma(s, pe_bf16_daz(xr[p + 1]), pe_bf16_daz(y[p + 1]));
                    s = pe_bf16_fma(s, pe_bf16_daz(xr[p]), pe_bf16_daz(y[p]));
                }
                cm[r * g->c_row + n] = pe_dot_canonical(s);
            }
    }
}

/* band[2 g], band[2 g + 1]: the least and one past the greatest column
 * the rows of group g read through map (equal where none).  A whole
 * group's entries are a window of w = PE_BF16_GROUP - 1 + other of them,
 * each window's least and greatest found from the running ones within
 * blocks of w entries, forwards (pre) and backwards (suf): one pass over
 * the map, whatever w; a last group of fewer rows is read entry by entry.
 * scratch: 4 (m_len + other - 1) entries. */
static void find_band(const struct pe_bf16_gemm *g0, const struct pe_bf16_map *map, ptrdiff_t *band,
                      int64_t *scratch)
{
    ptrdiff_t m_len = g0->m_len, w = PE_BF16_GROUP - 1 + map->other;
    ptrdiff_t n = m_len + map->other - 1;
    int64_t *pre_lo = scratch, *pre_hi = scratch + n, *suf_lo = scratch + 2 * n,
            *suf_hi = scratch + 3 * n;
    for (ptrdiff_t t = 0; t < n; ++t) { /* -1 (nothing read): no least, no greatest */
        int64_t col = map->map[t], lo = col >= 0 ? col : INT64_MAX;
        int first = t % w == 0;
        pre_lo[t] = first || lo < pre_lo[t - 1] ? lo : pre_lo[t - 1];
        pre_hi[t] = first || col > pre_hi[t - 1] ? col : pre_hi[t - 1];
    }
    for (ptrdiff_t t = n - 1; t >= 0; --t) {
        int64_t col = map->map[t], lo = col >= 0 ? col : INT64_MAX;
        int last = (t + 1) % w == 0 || t == n - 1;
        suf_lo[t] = last || lo < suf_lo[t + 1] ? lo : suf_lo[t + 1];
        suf_hi[t] = last || col > suf_hi[t + 1] ? col : suf_hi[t + 1];
    }
    for (ptrdiff_t m = 0; m < m_len; m += PE_BF16_GROUP) {
        ptrdiff_t rows = m_len - m < PE_BF16_GROUP ? m_len - m : PE_BF16_GROUP;
        ptrdiff_t s0 = map->by_key ? m : m_len - m - rows; /* the rows' first entries */
        int64_t lo = INT64_MAX, hi = -1;
        if (rows == PE_BF16_GROUP) {
            ptrdiff_t e = s0 + w - 1;
            lo = suf_lo[s0] < pre_lo[e] ? suf_lo[s0] : pre_lo[e];
            hi = suf_hi[s0] > pre_hi[e] ? suf_hi[s0] : pre_hi[e];
        } else {
            for (ptrdiff_t t = s0; t < s0 + rows - 1 + map->other; ++t) {
                int64_t col = map->map[t];
                if (col >= 0) {
                    lo = col < lo ? col : lo;
                    hi = col > hi ? col : hi;
                }
            }
        }
        band[2 * (m / PE_BF16_GROUP)] = hi < 0 ? 0 : (ptrdiff_t)lo;
        band[2 * (m / PE_BF16_GROUP) + 1] = hi < 0 ? 0 : (ptrdiff_t)hi + 1;
    }
}

int pe_bf16_products(const struct pe_kernels *k, const struct pe_bf16_gemm *g0,
                     const struct pe_bf16_map *map, int nthreads)
{
    ptrdiff_t chunks = (g0->m_len + ROWS_PER_TASK - 1) / ROWS_PER_TASK;
    ptrdiff_t ntasks = g0->heads * chunks;
    if (ntasks == 0 || g0->n_len == 0)
        return 0;
    int team = pe_team(nthreads, g0->heads * g0->m_len * g0->n_len);
    team = ntasks < team ? (int)ntasks : team;
    size_t bytes = (pe_bf16_pack_bytes(g0->n_len, g0->d) + 63) / 64 * 64;
    size_t groups = (size_t)(g0->m_len + PE_BF16_GROUP - 1) / PE_BF16_GROUP;
    size_t entries = map != NULL ? (size_t)(g0->m_len + map->other - 1) : 0;
    size_t band_bytes = map != NULL ? 2 * groups * sizeof(ptrdiff_t) + 4 * entries * 8 : 0;
    char *buf = malloc(bytes * (size_t)team + 64 + band_bytes);
    if (buf == NULL)
        return -1;
    struct pe_bf16_gemm gb = *g0;
    const struct pe_bf16_gemm *g = &gb;
    if (map != NULL) {
        ptrdiff_t *band = (ptrdiff_t *)(buf + bytes * (size_t)team + 64);
        find_band(g0, map, band, (int64_t *)(band + 2 * groups));
        gb.band = band;
    }
#pragma omp parallel num_threads(team)
    {
        char *mine = buf + bytes * (size_t)pe_thread_num();
        void *pack = mine + (64 - (uintptr_t)mine % 64) % 64;
        const uint16_t *held = NULL; /* the b laid out in pack */
#pragma omp for schedule(static)
        for (ptrdiff_t task = 0; task < ntasks; ++task) {
            ptrdiff_t h = task / chunks, m0 = task % chunks * ROWS_PER_TASK;
            ptrdiff_t m1 = m0 + ROWS_PER_TASK < g->m_len ? m0 + ROWS_PER_TASK : g->m_len;
            const uint16_t *b = g->b + h * g->b_head;
            k->bf16_rows(g, h, m0, m1, pack, held != b);
            held = b;
        }
    }
    free(buf);
    return 0;
}
