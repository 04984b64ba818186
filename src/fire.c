/*
 * fire.c -- FIRE's bias (Li et al., 2024) on the rows of the queries past
 * its threshold, whose normaliser psi(qpos) differs from row to row, so
 * that they are not slices of one vector per head (the rows at or before
 * the threshold are: posenc/functional_bias.py makes them by distance and
 * bias.c's pe_bias_given writes them).
 *
 * Element (i, j) of head h is an MLP of the normalised distance
 * x = psi[q_len - 1 - i + j] / norm[i], both made by the caller in NumPy:
 * hidden[w] = max(x * w1[w] + b1[w], 0), then ((hidden[0] * w2[h, 0] +
 * hidden[1] * w2[h, 1]) + ...) + b2[h], each operation rounded as
 * posenc/functional_bias.py's fire_tile rounds it (no FMA: the build has
 * -ffp-contract=off), the sum over the hidden units in their order.  So
 * the bits are those of that NumPy code, on every path, for any thread
 * count.  (np.maximum gives +0.0 for -0.0, as max(pre, 0) here; it would
 * keep a NaN, but pre is never one: x is finite and the weights are.)
 *
 * A task is a run of up to FIRE_TASK_KEYS keys of a row, handed out as
 * threads ask: their x, then chunk by chunk the hidden layer (width rows of
 * the chunk, in L1) and each head's values from it (the table's
 * fire_block: fire_avx2.c's four heads by eight keys at a time in
 * registers), then each head's run rounded once to the destination's type
 * and written, or added with the row primitive (pe_row_add, PE_ROW_SAME,
 * as pe_bias_given adds), into every batch.  The keys after a causal query
 * are -inf and skip the MLP.
 *
 * Left out, with the same bits: about half of the hidden units are 0 at a
 * given x (the ReLU), and fire_avx2.c leaves out of a block's sums the
 * units that are 0 at all its eight keys.  Their terms are 0 * w2[h, w],
 * +0.0 or -0.0 (w2 finite), and adding a zero changes a sum only when the
 * sum is itself a zero, and then only its sign: so the sums with and
 * without those terms are equal or both zeros, and so are the results
 * after + b2[h] unless b2[h] is itself a zero.  pe_fire_rows allows it
 * (skip_zeros) when no b2[h] is 0 and every w2[h, w] is finite.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pe.h"
#include "simd.h"

/* Keys of a task: several chunks of one row. */
#define FIRE_TASK_KEYS 512

/* Keys of a chunk, a multiple of 8: the hidden layer in about 16 KiB. */
static ptrdiff_t fire_chunk(ptrdiff_t width)
{
    ptrdiff_t n = ((ptrdiff_t)2048 / width) / 8 * 8;
    return n < 8 ? 8 : n > 256 ? 256 : n;
}

void pe_fire_block_scalar(const struct pe_fire *f, const double *x, ptrdiff_t n, double *hidden,
                          double *out, ptrdiff_t stride)
{
    /* every term, whatever skip_zeros allows */
    ptrdiff_t width = f->width;
    for (ptrdiff_t w = 0; w < width; ++w)
        for (ptrdiff_t j = 0; j < n; ++j) {
            double pre = x[j] * f->w1[w] + f->b1[w];
            hidden[w * n + j] = pre > 0.0 ? pre : 0.0;
        }
    for (ptrdiff_t h = 0; h < f->heads; ++h) {
        const double *v = f->w2 + h * width;
        double *o = out + h * stride;
        for (ptrdiff_t j = 0; j < n; ++j)
            o[j] = hidden[j] * v[0];
        for (ptrdiff_t w = 1; w < width; ++w)
            for (ptrdiff_t j = 0; j < n; ++j)
                o[j] = o[j] + hidden[w * n + j] * v[w];
        for (ptrdiff_t j = 0; j < n; ++j)
            o[j] = o[j] + f->b2[h];
    }
}

/* A thread's scratch: a task's x and the heads' values (float64, heads
 * rows of FIRE_TASK_KEYS), the block's scratch (the hidden layer), a row
 * of the destination's type. */
struct fire_scratch {
    double *x, *out, *block;
    char *row;
};

/* Whether fire_block may leave out hidden units that are 0 at all the keys
 * of a block (see above): every b2[h] nonzero, every w2[h, w] finite. */
static int fire_skips_zeros(const struct pe_fire *f)
{
    for (ptrdiff_t h = 0; h < f->heads; ++h)
        if (f->b2[h] == 0.0)
            return 0;
    for (ptrdiff_t e = 0; e < f->heads * f->width; ++e)
        if (!isfinite(f->w2[e]))
            return 0;
    return 1;
}

/* n values (float64), then -inf up to `to`, rounded once to dtype. */
static void fire_round(char *row, const double *v, ptrdiff_t n, ptrdiff_t to, int dtype)
{
    if (dtype == PE_F32) {
        for (ptrdiff_t j = 0; j < n; ++j)
            ((float *)row)[j] = (float)v[j];
    } else if (dtype == PE_F64) {
        memcpy(row, v, (size_t)n * sizeof *v);
    } else {
        for (ptrdiff_t j = 0; j < n; ++j)
            pe_store(row, j, dtype, v[j]);
    }
    for (ptrdiff_t j = n; j < to; ++j)
        pe_store(row, j, dtype, -INFINITY);
}

/* The lines of the destination that keys [j0, j0 + n) of row i will be
 * written into, asked for before the MLP's work so that they are in cache
 * when it is done (up to 256 KiB of them): each head's run is short, too
 * short for the hardware to see a stream in it. */
static void fire_prefetch(const struct pe_bias_dst *d, ptrdiff_t i, ptrdiff_t j0, ptrdiff_t n)
{
#if PE_HAS_PREFETCH
    ptrdiff_t isz = (ptrdiff_t)pe_itemsize(d->dtype), bytes = n * isz;
    if (bytes * d->heads * d->batch > ((ptrdiff_t)256 << 10))
        return;
    const char *row = d->data + i * d->stride_q + j0 * isz;
    for (ptrdiff_t b = 0; b < d->batch; ++b)
        for (ptrdiff_t h = 0; h < d->heads; ++h) {
            const char *o = row + b * d->stride_b + h * d->stride_h;
            for (ptrdiff_t c = 0; c < bytes; c += 64)
                PE_PREFETCH_W(o + c);
        }
#else
    (void)d, (void)i, (void)j0, (void)n;
#endif
}

/* Keys [j0, j0 + n) of row i (n <= FIRE_TASK_KEYS), every head and batch:
 * the MLP chunk by chunk, then each head's run of the row rounded and
 * written or added at once. */
static void fire_task(const struct pe_kernels *k, const struct pe_fire *f,
                      const struct pe_bias_dst *d, int add, ptrdiff_t chunk, ptrdiff_t i,
                      ptrdiff_t j0, ptrdiff_t n, const struct fire_scratch *s)
{
    ptrdiff_t valid = n;
    if (f->causal) { /* keys j <= qpos; qpos > 0 past a threshold >= 0 */
        int64_t past = f->q_offset + (int64_t)i + 1 - (int64_t)j0;
        valid = past < 0 ? 0 : past < (int64_t)n ? (ptrdiff_t)past : n;
    }
    fire_prefetch(d, i, j0, n);
    const double *psi = f->psi + (d->q_len - 1 - i + j0);
    double norm = f->norm[i];
    ptrdiff_t padded = (valid + 7) / 8 * 8;
    for (ptrdiff_t j = 0; j < valid; ++j)
        s->x[j] = psi[j] / norm;
    for (ptrdiff_t j = valid; j < padded; ++j)
        s->x[j] = 0.0;
    for (ptrdiff_t c = 0; c < padded; c += chunk)
        k->fire_block(f, s->x + c, padded - c < chunk ? padded - c : chunk, s->block, s->out + c,
                      FIRE_TASK_KEYS);
    size_t isz = pe_itemsize(d->dtype);
    pe_row_add_fn row_add = k->row_add[PE_ROW_SAME][d->dtype];
    for (ptrdiff_t h = 0; h < d->heads; ++h) {
        fire_round(s->row, s->out + h * FIRE_TASK_KEYS, valid, n, d->dtype);
        char *o = d->data + h * d->stride_h + i * d->stride_q + j0 * (ptrdiff_t)isz;
        for (ptrdiff_t b = 0; b < d->batch; ++b, o += d->stride_b) {
            if (add)
                row_add(o, s->row, n);
            else
                memcpy(o, s->row, (size_t)n * isz);
        }
    }
}

int pe_fire_rows(const struct pe_kernels *k, const struct pe_fire *fire,
                 const struct pe_bias_dst *dst, int add, int nthreads)
{
    if (dst->batch == 0)
        return 0;
    struct pe_fire mlp = *fire;
    const struct pe_fire *f = &mlp;
    mlp.skip_zeros = fire_skips_zeros(f);
    ptrdiff_t chunk = fire_chunk(f->width), klen = dst->k_len;
    ptrdiff_t per_row = (klen + FIRE_TASK_KEYS - 1) / FIRE_TASK_KEYS;
    ptrdiff_t ntasks = dst->q_len * per_row;
    /* doubles per thread: x, out, the block's scratch, a row of any type */
    ptrdiff_t block = PE_FIRE_SCRATCH(f->width, chunk);
    ptrdiff_t per_thread = FIRE_TASK_KEYS * (f->heads + 2) + block;
    int team = pe_team(nthreads, ntasks > 1 ? dst->heads * dst->q_len * klen : 0);
    double *scratch = malloc((size_t)(per_thread * team) * sizeof *scratch);
    if (scratch == NULL)
        return -1;
#pragma omp parallel num_threads(team)
    {
        const int tid = pe_thread_num();
        double *mine = scratch + tid * per_thread;
        struct fire_scratch s = {mine, mine + FIRE_TASK_KEYS,
                                 mine + FIRE_TASK_KEYS * (f->heads + 1),
                                 (char *)(mine + FIRE_TASK_KEYS * (f->heads + 1) + block)};
        /* dynamic: causal rows differ in work, and on a busy machine a
         * descheduled thread leaves its rows to the others */
#pragma omp for schedule(dynamic, 1)
        for (ptrdiff_t t = 0; t < ntasks; ++t) {
            ptrdiff_t i = t / per_row, j0 = t % per_row * FIRE_TASK_KEYS;
            ptrdiff_t n = klen - j0 < FIRE_TASK_KEYS ? klen - j0 : FIRE_TASK_KEYS;
            fire_task(k, f, dst, add, chunk, i, j0, n, &s);
        }
    }
    free(scratch);
    return 0;
}
