/*
 * cope.c -- CoPE's position logits into attention scores (cope.h): the
 * portable kernel, the check of the logits and the entry point.
 * cope_avx2.c has the AVX2 kernel.
 */
#include "cope.h"

#include <stdlib.h>

#include "pe.h"
#include "simd.h"

PE_COPE_ROWS_TABLE(pe_cope_rows_scalar, pe_cope_run, NULL);

void pe_cope_z_scalar(const double *q, const double *et, ptrdiff_t d, ptrdiff_t npos,
                      ptrdiff_t count, double *z, ptrdiff_t r0, ptrdiff_t r1)
{
    pe_cope_z_rows(q, et, d, npos, count, z, r0, r1);
}

static void sig_scalar(const char *l, int dtype, ptrdiff_t n, double *sig, double *sneg)
{
    pe_cope_sig_run(l, dtype, 0, n, sig, sneg);
}

void pe_cope_grad_row_scalar(const struct pe_cope_grad *c, ptrdiff_t r, double *scratch)
{
    pe_cope_grad_row(c, r, scratch, sig_scalar, pe_cope_z_scalar);
}

void pe_cope_grad_table_scalar(const struct pe_cope_grad *c, ptrdiff_t p0, ptrdiff_t p1)
{
    pe_cope_grad_table(c, p0, p1);
}

/* 1 if one of the n logits at l (of dtype) is nan or +inf, else 0. */
static int row_refused(const char *l, ptrdiff_t n, int dtype)
{
    int bad = 0;
    if (dtype == PE_F32) {
        const float *x = (const float *)l;
        for (ptrdiff_t j = 0; j < n; ++j)
            bad |= !(x[j] < INFINITY);
    } else if (dtype == PE_F64) {
        const double *x = (const double *)l;
        for (ptrdiff_t j = 0; j < n; ++j)
            bad |= !(x[j] < INFINITY);
    } else {
        /* float16 bits: +inf is 0x7c00, a nan has a larger magnitude */
        const uint16_t *x = (const uint16_t *)l;
        for (ptrdiff_t j = 0; j < n; ++j)
            bad |= ((x[j] & 0x7fff) > 0x7c00) | (x[j] == 0x7c00);
    }
    return bad;
}

/* 1 if one of the n values at x (of dtype) is nan or +-inf, else 0. */
static int row_not_finite(const char *x, ptrdiff_t n, int dtype)
{
    int bad = 0;
    if (dtype == PE_F32) {
        const float *v = (const float *)x;
        for (ptrdiff_t j = 0; j < n; ++j)
            bad |= !(v[j] < INFINITY && v[j] > -INFINITY);
    } else if (dtype == PE_F64) {
        const double *v = (const double *)x;
        for (ptrdiff_t j = 0; j < n; ++j)
            bad |= !(v[j] < INFINITY && v[j] > -INFINITY);
    } else {
        /* float16 bits: the largest exponent holds the infinities and nans */
        const uint16_t *v = (const uint16_t *)x;
        for (ptrdiff_t j = 0; j < n; ++j)
            bad |= (v[j] & 0x7fff) >= 0x7c00;
    }
    return bad;
}

/* Rows of a task of the kernel. */
#define COPE_ROWS 8

int pe_cope(const struct pe_kernels *k, const struct pe_cope *c, int nthreads)
{
    const struct pe_bias_dst *d = c->dst;
    const ptrdiff_t heads = d->heads, q_len = d->q_len, k_len = d->k_len;
    const ptrdiff_t rows = d->batch * heads * q_len;
    const struct pe_bias_dst *l = &c->logits;
    int bad = 0;
#pragma omp parallel for schedule(static) num_threads(pe_team(nthreads, (rows * k_len)))           \
    reduction(| : bad)
    for (ptrdiff_t r = 0; r < rows; ++r) {
        const ptrdiff_t i = r % q_len, h = (r / q_len) % heads, b = r / q_len / heads;
        bad |= row_refused(l->data + b * l->stride_b + h * l->stride_h + i * l->stride_q, k_len,
                           l->dtype);
    }
    if (bad)
        return -2;
    const pe_cope_rows_fn fn = k->cope_rows[c->add != 0][d->dtype];
    const ptrdiff_t tasks = (rows + COPE_ROWS - 1) / COPE_ROWS, npos = (ptrdiff_t)c->npos;
    const int team = pe_team(nthreads, rows * k_len);
    /* a thread's scratch: a task's queries in float64, then their z */
    const ptrdiff_t per_thread = COPE_ROWS * (c->d + npos);
    double *scratch = malloc((size_t)(per_thread * team) * sizeof *scratch);
    if (scratch == NULL)
        return -1;
#pragma omp parallel num_threads(team)
    {
        const int tid = pe_thread_num();
        double *q = scratch + tid * per_thread, *z = q + COPE_ROWS * c->d;
#pragma omp for schedule(dynamic, 1)
        for (ptrdiff_t t = 0; t < tasks; ++t) {
            const ptrdiff_t r0 = t * COPE_ROWS, r1 = rows - r0 < COPE_ROWS ? rows : r0 + COPE_ROWS;
            for (ptrdiff_t r = r0; r < r1; ++r)
                for (ptrdiff_t e = 0; e < c->d; ++e)
                    q[(r - r0) * c->d + e] =
                        pe_load(c->query + r * c->query_stride, e, c->query_dtype);
            k->cope_z(q, c->et, c->d, npos, npos, z, 0, r1 - r0);
            fn(c, r0, r1, z);
        }
    }
    free(scratch);
    return 0;
}

/* Rows of a task of the products. */
#define COPE_Z_ROWS 64

void pe_cope_products(const struct pe_kernels *k, const double *q, const double *et, ptrdiff_t rows,
                      ptrdiff_t d, ptrdiff_t npos, double *z, int nthreads)
{
    const ptrdiff_t tasks = (rows + COPE_Z_ROWS - 1) / COPE_Z_ROWS;
#pragma omp parallel for schedule(static) num_threads(pe_team(nthreads, rows * npos * d))
    for (ptrdiff_t t = 0; t < tasks; ++t) {
        const ptrdiff_t r0 = t * COPE_Z_ROWS;
        k->cope_z(q, et, d, npos, npos, z, r0, rows - r0 < COPE_Z_ROWS ? rows : r0 + COPE_Z_ROWS);
    }
}

void pe_cope_gates(const double *a, double *g, ptrdiff_t n, int exp_only, int nthreads)
{
#pragma omp parallel for schedule(static) num_threads(pe_team(nthreads, n))
    for (ptrdiff_t t = 0; t < n; ++t)
        g[t] = exp_only ? pe_cope_exp(a[t]) : pe_cope_gate(a[t]);
}

/* Positions of a task of the table's gradient. */
#define COPE_TABLE_POSITIONS 16

int pe_cope_grad(const struct pe_kernels *k, const struct pe_cope_grad *call, int nthreads)
{
    const ptrdiff_t rows = call->rows, npos = (ptrdiff_t)call->npos, k_len = call->k_len;
    const ptrdiff_t d = call->d, tasks = (rows + COPE_ROWS - 1) / COPE_ROWS;
    const ptrdiff_t table_tasks = (npos + COPE_TABLE_POSITIONS - 1) / COPE_TABLE_POSITIONS;
    const int team = pe_team(nthreads, rows * k_len);
    int bad_logits = 0, bad_grad = 0;
#pragma omp parallel for schedule(static) num_threads(team) reduction(| : bad_logits, bad_grad)
    for (ptrdiff_t r = 0; r < rows; ++r) {
        bad_logits |= row_refused(call->logits + r * call->lstride, k_len, call->logits_dtype);
        bad_grad |= row_not_finite(call->grad + r * call->gstride, k_len, call->grad_dtype);
    }
    if (bad_logits || bad_grad)
        return bad_logits ? -2 : -3;
    struct pe_cope_grad c = *call;
    c.dz = malloc((size_t)(rows * npos) * sizeof *c.dz);
    c.q64 = malloc((size_t)(rows * d) * sizeof *c.q64);
    c.pmax = malloc((size_t)rows * sizeof *c.pmax);
    /* a thread's scratch: a row's (pe_cope_grad_row's) */
    const ptrdiff_t per_thread = PE_COPE_GRAD_SCRATCH(k_len, npos, d);
    double *scratch = malloc((size_t)(per_thread * team) * sizeof *scratch);
    if (c.dz == NULL || c.q64 == NULL || c.pmax == NULL || scratch == NULL) {
        free(c.dz), free(c.q64), free(c.pmax), free(scratch);
        return -1;
    }
#pragma omp parallel num_threads(team)
    {
        const int tid = pe_thread_num();
        double *row = scratch + tid * per_thread;
#pragma omp for schedule(dynamic, 1)
        for (ptrdiff_t t = 0; t < tasks; ++t) {
            const ptrdiff_t r0 = t * COPE_ROWS, r1 = rows - r0 < COPE_ROWS ? rows : r0 + COPE_ROWS;
            for (ptrdiff_t r = r0; r < r1; ++r)
                for (ptrdiff_t e = 0; e < d; ++e)
                    c.q64[r * d + e] = pe_load(c.query + r * c.query_stride, e, c.query_dtype);
            for (ptrdiff_t r = r0; r < r1; ++r)
                k->cope_grad_row(&c, r, row);
        }
        /* (the loop's barrier: every row's dz and pmax are in) */
#pragma omp for schedule(dynamic, 1)
        for (ptrdiff_t t = 0; t < table_tasks; ++t) {
            const ptrdiff_t p0 = t * COPE_TABLE_POSITIONS;
            k->cope_grad_table(&c, p0,
                               npos - p0 < COPE_TABLE_POSITIONS ? npos : p0 + COPE_TABLE_POSITIONS);
        }
    }
    free(c.dz), free(c.q64), free(c.pmax), free(scratch);
    return 0;
}
