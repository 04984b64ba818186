/*
 * rope.c -- rotary position embedding (Su et al., RoFormer), the plan of
 * the iteration and the entry point: every pair of the first 2*half
 * elements of a row is rotated by the angle pos * freq[i],
 *
 *     a' = a cos - b sin,   b' = b cos + a sin,
 *
 * where the pair is (x[i], x[i + half]) in the "half" layout (GPT-NeoX,
 * Llama in transformers) and (x[2i], x[2i + 1]) in the "interleaved" one
 * (GPT-J, RoFormer, Meta's Llama); the rest of the row is copied.
 *
 * Memory traffic.  A rotation is a few FMAs per element, so the kernel is
 * bound by reading x and writing out, exactly the bytes np.copyto moves; the
 * design keeps everything else out of main memory:
 *
 * - cos and sin are never materialised for the whole array.  The rows of x
 *   are described by their leading dimensions (any strides: only the last
 *   axis must be contiguous, so views are not copied) and the positions by
 *   an array of the same leading shape whose broadcast dimensions have
 *   stride 0.  The dimensions along which the position varies are cut into
 *   tiles; a thread computes cos/sin for the positions of one tile (at most
 *   PE_ROPE_TILE_BYTES, kept in L2) and then rotates every row that uses
 *   them (all batches and heads), walking them in the memory order of x.
 *   Each position's cos/sin is computed once, and the row -> cos/sin
 *   mapping costs nothing per row: it is a stride.
 * - When cos/sin change from row to row (the sequence axis innermost, as in
 *   transformers' (batch, heads, seq, dim)), PE_ROPE_LANES rows of the next
 *   dimension out (heads) are rotated together, so each cos/sin vector is
 *   loaded once for all of them: four sequential streams, and a quarter of
 *   the table reads.
 * - A large output is written with non-temporal stores: it would not stay
 *   in cache anyway, and reading its lines before writing them would cost
 *   half as much traffic again.  Rows of lanes are rotated into a small L1
 *   buffer and streamed out one lane after the other, so that the
 *   write-combining buffers fill whole lines.
 *
 * Precision.  The angle is the float64 product pos * freq[i] and its sine
 * and cosine are computed in float64, multiplied by the attention factor
 * and rounded once to the compute precision: float32 for float16/float32
 * data, float64 for float64 data (rope_table.c).  The rotation is then one
 * multiply and one FMA per output in that precision.
 *
 * Positions in channels (M-RoPE, axial RoPE) change only the tables: pair
 * i takes the position of its channel, chan_stride bytes past the row's,
 * and the channels' positions share the strides of the leading dimensions,
 * so the plan above is the same; the row kernels never know.
 *
 * Paths.  The row kernels are the table's rope_run, indexed by layout and
 * dtype: the AVX2 ones (rope_avx2.c) do 8 (float32, float16 through F16C)
 * or 4 (float64) elements per step; the portable ones (rope_run.c) the
 * same arithmetic one element at a time (fmaf/fma in the same order), so
 * both give the same bits.  OpenMP threads take tiles (or, when there are
 * few, slices of the outermost broadcast dimension) dynamically.
 */
#include <math.h>
#include <stdlib.h>
#include "pe.h"
#include "rope.h"
#include "simd.h"
#include "sincos.h"

/* Bytes of cos/sin a thread keeps for one tile: they stay in L2 while the
 * rows using them stream through, and a tile is long enough (256 positions
 * of a 128-wide float32 head) for the hardware prefetchers. */
#define PE_ROPE_TILE_BYTES 131072
/* Tasks per thread wanted for balance when there are few tiles. */
#define PE_ROPE_TASKS_PER_THREAD 4

/* ---- the plan: dimensions, tiles, tasks ---- */

struct pe_dimension {
    ptrdiff_t n, xs, os, ps; /* length; strides of x, out, positions in bytes */
};

struct plan {
    int nd;
    struct pe_dimension d[PE_ROPE_MAXDIM];
    int k;             /* the tiled dimension: innermost one where the position varies, or -1 */
    int split;         /* broadcast dimension sliced among threads, or -1 */
    ptrdiff_t tile;    /* tile length along k */
    ptrdiff_t nchunks; /* tiles along k */
    ptrdiff_t n_other; /* product of the other dimensions where the position varies */
    ptrdiff_t nslices; /* slices of the split dimension */
    ptrdiff_t slice;   /* their length */
    ptrdiff_t ntasks;
    int stream; /* output too large for the caches: non-temporal stores */
};

static ptrdiff_t abs_pd(ptrdiff_t v)
{
    return v < 0 ? -v : v;
}

static ptrdiff_t ceil_div(ptrdiff_t a, ptrdiff_t b)
{
    return (a + b - 1) / b;
}

/* Dimensions of length > 1, outermost first in x's memory (so that rows are
 * visited as they lie), adjacent ones merged where all three strides allow
 * and the positions do not vary along them: the anchor grid of the tables
 * stays on an axis of the caller's array, whatever its layout. */
static int simplify(const struct pe_rope_args *a, struct plan *p)
{
    int nd = 0;
    for (int i = 0; i < a->ndim; ++i) {
        if (a->shape[i] == 0)
            return -1; /* nothing to do */
        if (a->shape[i] == 1)
            continue;
        p->d[nd].n = a->shape[i];
        p->d[nd].xs = a->x_strides[i];
        p->d[nd].os = a->out_strides[i];
        p->d[nd].ps = a->pos_strides[i];
        ++nd;
    }
    /* stable insertion sort by |x stride|, then |out stride|, descending */
    for (int i = 1; i < nd; ++i) {
        struct pe_dimension v = p->d[i];
        int j = i;
        while (j > 0 &&
               (abs_pd(p->d[j - 1].xs) < abs_pd(v.xs) || (abs_pd(p->d[j - 1].xs) == abs_pd(v.xs) &&
                                                          abs_pd(p->d[j - 1].os) < abs_pd(v.os)))) {
            p->d[j] = p->d[j - 1];
            --j;
        }
        p->d[j] = v;
    }
    int m = 0;
    for (int i = 0; i < nd; ++i) {
        if (m > 0) {
            struct pe_dimension *o = &p->d[m - 1], *in = &p->d[i];
            if (o->ps == 0 && in->ps == 0 && o->xs == in->xs * in->n && o->os == in->os * in->n) {
                o->n *= in->n;
                o->xs = in->xs, o->os = in->os, o->ps = in->ps;
                continue;
            }
        }
        p->d[m++] = p->d[i];
    }
    p->nd = m;
    return 0;
}

static void make_plan(struct plan *p, ptrdiff_t rowbytes, int nthreads)
{
    p->k = -1;
    p->n_other = 1;
    for (int i = 0; i < p->nd; ++i) {
        if (p->d[i].ps != 0) {
            if (p->k >= 0)
                p->n_other *= p->d[p->k].n;
            p->k = i;
        }
    }
    ptrdiff_t nk = p->k >= 0 ? p->d[p->k].n : 1;
    /* whole cells of the anchor grid per tile, even when rows are long */
    ptrdiff_t tile = PE_ROPE_TILE_BYTES / rowbytes;
    ptrdiff_t unit = PE_ANCHOR;
    tile = tile < unit ? unit : tile - tile % unit;
    ptrdiff_t target = nthreads > 1 ? (ptrdiff_t)nthreads * PE_ROPE_TASKS_PER_THREAD : 1;
    /* few tiles: shorter ones, before slicing the broadcast rows */
    if (p->n_other * ceil_div(nk, tile) < target) {
        ptrdiff_t want = ceil_div(target, p->n_other);
        ptrdiff_t t = ceil_div(ceil_div(nk, want), unit) * unit;
        tile = t < tile ? t : tile;
    }
    p->tile = tile > nk ? nk : tile;
    p->nchunks = ceil_div(nk, p->tile);
    p->split = -1;
    p->nslices = 1;
    p->slice = 1;
    ptrdiff_t ntiles = p->n_other * p->nchunks;
    if (ntiles < target) {
        for (int i = 0; i < p->nd; ++i)
            if (p->d[i].ps == 0) {
                p->split = i;
                break;
            }
        if (p->split >= 0) {
            ptrdiff_t ns = p->d[p->split].n, want = ceil_div(target, ntiles);
            p->slice = ceil_div(ns, want < ns ? want : ns);
            p->nslices = ceil_div(ns, p->slice);
        }
    }
    p->ntasks = ntiles * p->nslices;
}

/* One task: fixed indices of the other varying dimensions, one tile along
 * k, one slice of the split dimension; every row in that box. */
static void run_task(const struct pe_kernels *k, const struct pe_rope_args *a, const struct plan *p,
                     const struct pe_rope_chan *chan, ptrdiff_t task, pe_rope_run_fn run,
                     ptrdiff_t rowbytes, double wmax, char *tab, struct pe_rotor *rt,
                     double *xpos_scratch, char *bounce)
{
    const char *xb = a->x, *pb = a->pos;
    char *ob = a->out;
    ptrdiff_t slice_i = task % p->nslices;
    ptrdiff_t rest = task / p->nslices;
    ptrdiff_t chunk = rest % p->nchunks;
    ptrdiff_t other = rest / p->nchunks;
    for (int i = p->nd - 1; i >= 0; --i) {
        if (p->d[i].ps == 0 || i == p->k)
            continue;
        ptrdiff_t idx = other % p->d[i].n;
        other /= p->d[i].n;
        xb += idx * p->d[i].xs, ob += idx * p->d[i].os, pb += idx * p->d[i].ps;
    }
    ptrdiff_t ntab = 1, pstride = 0;
    if (p->k >= 0) {
        const struct pe_dimension *dk = &p->d[p->k];
        ptrdiff_t j0 = chunk * p->tile;
        ntab = dk->n - j0 < p->tile ? dk->n - j0 : p->tile;
        xb += j0 * dk->xs, ob += j0 * dk->os, pb += j0 * dk->ps;
        pstride = dk->ps;
    }
    if (chan != NULL)
        pe_rope_fill_table_chan(k, chan, pb, pstride, ntab, a->half, a->scale, a->inverse,
                                a->dtype == PE_F64, tab, rt);
    else
        pe_rope_fill_table(k, pb, pstride, ntab, a->freq, a->half, wmax, a->scale, a->inverse,
                           &a->xpos, xpos_scratch, a->dtype == PE_F64, tab, rt);

    /* the box: broadcast dimensions and k, in memory order */
    struct pe_dimension box[PE_ROPE_MAXDIM];
    ptrdiff_t ts[PE_ROPE_MAXDIM];
    int nb = 0;
    for (int i = 0; i < p->nd; ++i) {
        if (p->d[i].ps != 0 && i != p->k)
            continue;
        box[nb] = p->d[i];
        ts[nb] = 0;
        if (i == p->k) {
            box[nb].n = ntab;
            ts[nb] = rowbytes;
        } else if (i == p->split) {
            ptrdiff_t s0 = slice_i * p->slice;
            box[nb].n = p->d[i].n - s0 < p->slice ? p->d[i].n - s0 : p->slice;
            xb += s0 * p->d[i].xs, ob += s0 * p->d[i].os;
        }
        ++nb;
    }
    struct pe_rope_run r = {.x = xb,
                            .o = ob,
                            .tab = tab,
                            .n = 1,
                            .lanes = 1,
                            .half = a->half,
                            .dim = a->dim,
                            .stream = p->stream,
                            .bounce = bounce};
    if (nb == 0) {
        run(&r);
        return;
    }
    /* innermost: the run; if the table row changes along it, the next
     * dimension out (where it does not) supplies lanes sharing each row */
    int in = nb - 1, lane = nb >= 2 && ts[in] != 0 && ts[in - 1] == 0 ? in - 1 : -1;
    int nouter = lane >= 0 ? lane : in;
    ptrdiff_t nlane = lane >= 0 ? box[lane].n : 1;
    r.xs = box[in].xs, r.os = box[in].os, r.ts = ts[in], r.n = box[in].n;
    if (lane >= 0)
        r.lxs = box[lane].xs, r.los = box[lane].os;
    ptrdiff_t idx[PE_ROPE_MAXDIM] = {0};
    const char *xp = xb, *tp = tab;
    char *op = ob;
    for (;;) {
        for (ptrdiff_t g = 0; g < nlane; g += PE_ROPE_LANES) {
            r.x = xp + (lane >= 0 ? g * box[lane].xs : 0);
            r.o = op + (lane >= 0 ? g * box[lane].os : 0);
            r.tab = tp;
            r.lanes = nlane - g < PE_ROPE_LANES ? nlane - g : PE_ROPE_LANES;
            run(&r);
        }
        int d = nouter - 1;
        for (; d >= 0; --d) {
            if (++idx[d] < box[d].n) {
                xp += box[d].xs, op += box[d].os, tp += ts[d];
                break;
            }
            xp -= (box[d].n - 1) * box[d].xs, op -= (box[d].n - 1) * box[d].os;
            tp -= (box[d].n - 1) * ts[d];
            idx[d] = 0;
        }
        if (d < 0)
            break;
    }
}

int pe_rope_apply(const struct pe_kernels *k, const struct pe_rope_args *a, int nthreads)
{
    if (a->ndim > PE_ROPE_MAXDIM || a->half < 1 || 2 * a->half > a->dim || a->layout < 0 ||
        a->layout >= PE_ROPE_NLAYOUTS)
        return -2;
    struct plan p;
    if (simplify(a, &p) < 0)
        return 0;
    ptrdiff_t nrows = 1;
    for (int i = 0; i < p.nd; ++i)
        nrows *= p.d[i].n;
    ptrdiff_t tab_es = a->dtype == PE_F64 ? 8 : 4;
    ptrdiff_t rowbytes = 2 * a->half * tab_es;
    int parallel = nthreads > 1 && nrows * a->dim >= PE_PARALLEL_MIN;
    if (!parallel)
        nthreads = 1;
    make_plan(&p, rowbytes, nthreads);
    p.stream = nrows * a->dim * (ptrdiff_t)pe_itemsize(a->dtype) >= PE_STREAM_BYTES;

    double wmax = pe_max_abs(a->freq, a->half);
    struct pe_rope_chan chan, *chp = NULL;
    if (a->channel != NULL && a->xpos.log_zeta != NULL)
        return -2; /* xPos with positions in channels: not defined */
    if (a->channel != NULL) {
        int rc = pe_rope_chan_init(&chan, a->channel, a->nchan, a->chan_stride, a->freq, a->half);
        if (rc != 0) {
            pe_rope_chan_free(&chan);
            return rc;
        }
        chp = &chan;
    }

    /* scratch per thread: the tile's table, then float64 sin and cos rows
     * (and xPos's factors), allocated here so that a failure happens before
     * anything is written */
    ptrdiff_t tab_bytes = (p.tile * rowbytes + 63) / 64 * 64;
    ptrdiff_t sc_bytes = (6 * a->half * 8 + 63) / 64 * 64;
    ptrdiff_t bounce_bytes =
        (PE_ROPE_LANES * 2 * a->half * (ptrdiff_t)pe_itemsize(a->dtype) + 63) / 64 * 64;
    ptrdiff_t per_thread = tab_bytes + sc_bytes + bounce_bytes;
    char *scratch = malloc((size_t)(per_thread * nthreads));
    if (scratch == NULL) {
        if (chp != NULL)
            pe_rope_chan_free(chp);
        return -1;
    }
    pe_rope_run_fn run = k->rope_run[a->layout][a->dtype];

#pragma omp parallel num_threads(nthreads) if (parallel)
    {
        const int tid = pe_thread_num();
        char *mine = scratch + (ptrdiff_t)tid * per_thread;
        double *buf = (double *)(mine + tab_bytes);
        struct pe_rotor rt = {buf, buf + a->half, buf + 2 * a->half, buf + 3 * a->half, NAN};
        char *bounce = mine + tab_bytes + sc_bytes;
        /* dynamic: on a busy machine a descheduled thread leaves its tiles
         * to the others instead of holding up the whole call */
#pragma omp for schedule(dynamic, 1)
        for (ptrdiff_t t = 0; t < p.ntasks; ++t)
            run_task(k, a, &p, chp, t, run, rowbytes, wmax, mine, &rt, buf + 4 * a->half, bounce);
    }
    free(scratch);
    if (chp != NULL)
        pe_rope_chan_free(chp);
    return 0;
}
