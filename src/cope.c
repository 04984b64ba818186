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

void pe_cope_z_scalar(const double *q, const double *et, ptrdiff_t d, ptrdiff_t npos, double *z,
                      ptrdiff_t r0, ptrdiff_t r1)
{
    pe_cope_z_rows(q, et, d, npos, z, r0, r1);
}

void pe_cope_sig_scalar(const char *l, int dtype, ptrdiff_t n, double *sig, double *sneg)
{
    pe_cope_sig_run(l, dtype, 0, n, sig, sneg);
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
            k->cope_z(q, c->et, c->d, npos, z, 0, r1 - r0);
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
        k->cope_z(q, et, d, npos, z, r0, rows - r0 < COPE_Z_ROWS ? rows : r0 + COPE_Z_ROWS);
    }
}

void pe_cope_gates(const double *a, double *g, ptrdiff_t n, int exp_only, int nthreads)
{
#pragma omp parallel for schedule(static) num_threads(pe_team(nthreads, n))
    for (ptrdiff_t t = 0; t < n; ++t)
        g[t] = exp_only ? pe_cope_exp(a[t]) : pe_cope_gate(a[t]);
}

/* Row r of a backward call: sig and pos the row's scratch (k_len), zh and
 * zl (npos) the sums of the gradient of z at each key's ceil and floor, z
 * the row's products.  Each step is grad_numpy's, op for op: a key after
 * the query has position 0 (its gates and the later ones are 0) and a
 * gradient of 0. */
static void grad_row(const struct pe_kernels *k, const struct pe_cope_grad *c, ptrdiff_t r,
                     const double *z, double *sig, double *sneg, double *pos, double *zh,
                     double *zl)
{
    const ptrdiff_t k_len = c->k_len, npos = (ptrdiff_t)c->npos, i = r % c->q_len;
    const char *l = c->logits + r * c->lstride, *g = c->grad + r * c->gstride;
    char *o = c->d_logits + r * c->dstride;
    double *dz = c->dz + r * npos;
    const double top = (double)(npos - 1);
    int64_t last = (int64_t)k_len - 1;
    if (c->causal && c->q_offset + (int64_t)i < last)
        last = c->q_offset + (int64_t)i < -1 ? -1 : c->q_offset + (int64_t)i;
    /* the gates of the keys seen, and the positions summed from the row's end back */
    k->cope_sig(l, c->logits_dtype, (ptrdiff_t)(last + 1), sig, sneg);
    double s = 0.0;
    for (ptrdiff_t j = (ptrdiff_t)last; j >= 0; --j) {
        s = s + sig[j];
        pos[j] = s;
    }
    for (ptrdiff_t p = 0; p < npos; ++p)
        zh[p] = zl[p] = 0.0;
    double dgate = 0.0;
    for (ptrdiff_t j = 0; j < k_len; ++j) {
        const int seen = (int64_t)j <= last;
        const double p = seen ? pos[j] : 0.0;
        const double clipped = p < top ? p : top;
        const double lo = floor(clipped), hi = ceil(clipped), w = clipped - lo;
        const ptrdiff_t ilo = (ptrdiff_t)lo, ihi = (ptrdiff_t)hi;
        const double gj = pe_load(g, j, c->grad_dtype);
        zh[ihi] = zh[ihi] + gj * w;
        zl[ilo] = zl[ilo] + gj * (1.0 - w);
        /* d p through w only, 0 where the clip cut p; d gate_t = sum_{j <= t} d p_j */
        const double dp = p <= top ? gj * (z[ihi] - z[ilo]) : 0.0;
        dgate = j == 0 ? dp : dgate + dp;
        /* sigmoid'(a) = sigmoid(a) sigmoid(-a) */
        pe_store(o, j, c->d_dtype, seen ? (dgate * sig[j]) * sneg[j] : 0.0);
    }
    for (ptrdiff_t p = 0; p < npos; ++p)
        dz[p] = zh[p] + zl[p];
}

int pe_cope_grad(const struct pe_kernels *k, const struct pe_cope_grad *c, int nthreads)
{
    const ptrdiff_t rows = c->rows, npos = (ptrdiff_t)c->npos, k_len = c->k_len;
    const ptrdiff_t tasks = (rows + COPE_ROWS - 1) / COPE_ROWS;
    const int team = pe_team(nthreads, rows * k_len);
    /* a thread's scratch: a task's queries in float64, their z, then a
     * row's gates, their mirrors and positions and the two sums of the
     * gradient of z */
    const ptrdiff_t per_thread = COPE_ROWS * (c->d + npos) + 3 * k_len + 2 * npos;
    double *scratch = malloc((size_t)(per_thread * team) * sizeof *scratch);
    if (scratch == NULL)
        return -1;
#pragma omp parallel num_threads(team)
    {
        const int tid = pe_thread_num();
        double *q = scratch + tid * per_thread, *z = q + COPE_ROWS * c->d;
        double *sig = z + COPE_ROWS * npos, *sneg = sig + k_len, *pos = sneg + k_len;
        double *zh = pos + k_len, *zl = zh + npos;
#pragma omp for schedule(dynamic, 1)
        for (ptrdiff_t t = 0; t < tasks; ++t) {
            const ptrdiff_t r0 = t * COPE_ROWS, r1 = rows - r0 < COPE_ROWS ? rows : r0 + COPE_ROWS;
            for (ptrdiff_t r = r0; r < r1; ++r)
                for (ptrdiff_t e = 0; e < c->d; ++e)
                    q[(r - r0) * c->d + e] =
                        pe_load(c->query + r * c->query_stride, e, c->query_dtype);
            k->cope_z(q, c->et, c->d, npos, z, 0, r1 - r0);
            for (ptrdiff_t r = r0; r < r1; ++r)
                grad_row(k, c, r, z + (r - r0) * npos, sig, sneg, pos, zh, zl);
        }
    }
    free(scratch);
    return 0;
}
