/*
 * dot.c -- the products of bfloat16 vectors (dot.h): the portable body,
 * one addition at a time in double (pe_bf16_fma), and the entry point,
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
     * AVX-512 BF16 one takes half), then 16 rows of a widened */
    size_t cols = (size_t)(n_len + 31) / 32 * 32;
    return (cols * (size_t)d + 16 * (size_t)d) * sizeof(float) + 64;
}

void pe_bf16_rows_scalar(const struct pe_bf16_gemm *g, ptrdiff_t h, ptrdiff_t m0, ptrdiff_t m1,
                         void *pack, int pack_now)
{
    (void)pack;
    (void)pack_now;
    const uint16_t *a = g->a + h * g->a_head, *b = g->b + h * g->b_head;
    float *c = g->c + h * g->c_head;
    const float *init = g->init != NULL ? g->init + h * g->init_head : NULL;
    for (ptrdiff_t m = m0; m < m1; ++m) {
        const uint16_t *x = a + m * g->a_row;
        ptrdiff_t lo, hi;
        pe_bf16_columns(g, m, 1, &lo, &hi);
        pe_bf16_zero_outside(c + m * g->c_row, g->c_row, 1, lo, hi, g->n_len);
        for (ptrdiff_t n = lo; n < hi; ++n) {
            const uint16_t *y = b + n * g->b_row;
            float s = init != NULL ? pe_f32_daz(init[n]) : 0.0f;
            for (ptrdiff_t p = 0; p < g->d; p += 2) {
                s = pe_bf16_fma(s, pe_bf16_daz(x[p + 1]), pe_bf16_daz(y[p + 1]));
                s = pe_bf16_fma(s, pe_bf16_daz(x[p]), pe_bf16_daz(y[p]));
            }
            c[m * g->c_row + n] = pe_dot_canonical(s);
        }
    }
}

/* band[2 g], band[2 g + 1]: the least and one past the greatest column
 * the rows of group g read through map (equal where none). */
static void find_band(const struct pe_bf16_gemm *g0, const struct pe_bf16_map *map, ptrdiff_t *band)
{
    ptrdiff_t m_len = g0->m_len;
    for (ptrdiff_t m = 0; m < m_len; m += PE_BF16_GROUP) {
        ptrdiff_t rows = m_len - m < PE_BF16_GROUP ? m_len - m : PE_BF16_GROUP;
        ptrdiff_t s0 = map->by_key ? m : m_len - m - rows; /* the rows' first entries */
        int64_t lo = INT64_MAX, hi = -1;
        for (ptrdiff_t t = s0; t < s0 + rows - 1 + map->other; ++t) {
            int64_t col = map->map[t];
            if (col >= 0) {
                lo = col < lo ? col : lo;
                hi = col > hi ? col : hi;
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
    size_t band_bytes = map != NULL ? 2 * groups * sizeof(ptrdiff_t) : 0;
    char *buf = malloc(bytes * (size_t)team + 64 + band_bytes);
    if (buf == NULL)
        return -1;
    struct pe_bf16_gemm gb = *g0;
    const struct pe_bf16_gemm *g = &gb;
    if (map != NULL) {
        ptrdiff_t *band = (ptrdiff_t *)(buf + bytes * (size_t)team + 64);
        find_band(g0, map, band);
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
