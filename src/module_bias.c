/*
 * module_bias.c -- posenc._core's attention biases: alibi, bias_given (a
 * bias from its per-head vectors), t5_bias, t5_table_grad, t5_buckets,
 * relative_positions and fire_rows (FIRE's rows past its threshold), their
 * arguments checked, then the entry points of bias.c and fire.c.
 */
#include "module.h"

/* ---- attention biases (bias.c) ---- */

/* An argument with one entry per head along `axis` (what: "elements" or
 * "columns") that must not overlap the target; 0, or -1 with an error. */
static int check_per_head(PyArrayObject *a, int axis, const char *name, const char *what,
                          PyArrayObject *dst, const struct pe_bias_dst *d)
{
    if (PyArray_DIM(a, axis) != d->heads) {
        PyErr_Format(PyExc_ValueError, "%s must have %zd %s (one per head), not %zd", name,
                     (Py_ssize_t)d->heads, what, (Py_ssize_t)PyArray_DIM(a, axis));
        return -1;
    }
    return check_no_overlap(dst, "scores", a, name);
}

/* |q_offset| <= 2**53: every distance is then exact in float64. */
static int check_q_offset(long long q_offset)
{
    if (q_offset < -PE_MAX_Q_OFFSET || q_offset > PE_MAX_Q_OFFSET) {
        PyErr_SetString(PyExc_ValueError, "q_offset must be between -2**53 and 2**53");
        return -1;
    }
    return 0;
}

/* T5's num_buckets, and the thresholds of its logarithmic buckets (from
 * posenc/_t5.py): a C-contiguous int64 vector of non-decreasing distances,
 * past the exact buckets, no more of them than there are logarithmic
 * buckets.  Returns the thresholds' array, or NULL with an error. */
static PyArrayObject *check_t5(long long num_buckets, int bidirectional, PyObject *thresh_o)
{
    if (num_buckets < 2 || num_buckets > PE_T5_MAX_BUCKETS) {
        PyErr_Format(PyExc_ValueError, "num_buckets must be between 2 and %d, got %lld",
                     PE_T5_MAX_BUCKETS, num_buckets);
        return NULL;
    }
    PyArrayObject *thresh = arg_array(thresh_o, "thresholds", NPY_INT64, 1, ARG_CONTIGUOUS);
    if (thresh == NULL)
        return NULL;
    long long per_dir = bidirectional ? num_buckets / 2 : num_buckets, exact = per_dir / 2;
    npy_intp n = PyArray_DIM(thresh, 0);
    const int64_t *t = (const int64_t *)PyArray_DATA(thresh);
    int ok = n == 0 || (exact > 0 && n <= per_dir - 1 - exact && t[0] > exact);
    for (npy_intp k = 1; ok && k < n; ++k)
        ok = t[k] >= t[k - 1]; /* two buckets may step at one distance */
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "thresholds must be non-decreasing distances past the "
                                          "exact buckets, one per logarithmic bucket at most");
        return NULL;
    }
    return thresh;
}

struct alibi_call {
    const double *slopes;
    int causal, add;
    int64_t q_offset;
    const struct pe_bias_dst *dst;
};

static int alibi_kernel(const struct pe_kernels *k, void *args, int nthreads)
{
    const struct alibi_call *c = args;
    return pe_alibi(k, c->slopes, c->causal, c->q_offset, c->dst, c->add, nthreads);
}

PyObject *py_alibi(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *slopes_o, *dst_o;
    long long q_offset;
    int causal, add;
    if (!PyArg_ParseTuple(args, "OOLpp:alibi", &slopes_o, &dst_o, &q_offset, &causal, &add))
        return NULL;
    struct pe_bias_dst d;
    PyArrayObject *slopes = arg_array(slopes_o, "slopes", NPY_DOUBLE, 1, ARG_CONTIGUOUS);
    PyArrayObject *dst =
        slopes ? bias_target(dst_o, add ? "scores" : "out", FLOAT_OR_BF16, &d) : NULL;
    if (dst == NULL || check_q_offset(q_offset) < 0)
        return NULL;
    if (check_per_head(slopes, 0, "slopes", "elements", dst, &d) < 0)
        return NULL;
    struct alibi_call c = {(const double *)PyArray_DATA(slopes), causal, add, (int64_t)q_offset,
                           &d};
    return kernel_result(run_kernel(alibi_kernel, &c, PyArray_SIZE(dst)), NULL);
}

/* A kernel of run_kernel whose entry point writes or adds rows into a
 * pe_bias_dst: struct NAME_call {what, add, dst} and NAME_kernel. */
#define DST_KERNEL(name, type, entry)                                                              \
    struct name##_call {                                                                           \
        type what;                                                                                 \
        int add;                                                                                   \
        const struct pe_bias_dst *dst;                                                             \
    };                                                                                             \
    static int name##_kernel(const struct pe_kernels *k, void *args, int nthreads)                 \
    {                                                                                              \
        const struct name##_call *c = args;                                                        \
        return entry(k, &c->what, c->dst, c->add, nthreads);                                       \
    }

DST_KERNEL(bias_given, struct pe_bias_given, pe_bias_given)

PyObject *py_bias_given(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *values_o, *dst_o;
    int add;
    if (!PyArg_ParseTuple(args, "OOp:bias_given", &values_o, &dst_o, &add))
        return NULL;
    struct pe_bias_dst d;
    PyArrayObject *values = arg_array(values_o, "values", NPY_DOUBLE, 2, ARG_CONTIGUOUS);
    PyArrayObject *dst =
        values ? bias_target(dst_o, add ? "scores" : "out", FLOAT_OR_BF16, &d) : NULL;
    if (dst == NULL || check_per_head(values, 0, "values", "rows", dst, &d) < 0)
        return NULL;
    ptrdiff_t vlen = d.q_len + d.k_len - 1;
    if (PyArray_DIM(values, 1) != vlen) {
        PyErr_Format(PyExc_ValueError,
                     "values must have %zd columns (q_len + k_len - 1, one per distance), not %zd",
                     (Py_ssize_t)vlen, (Py_ssize_t)PyArray_DIM(values, 1));
        return NULL;
    }
    struct bias_given_call c = {{(const double *)PyArray_DATA(values), vlen}, add, &d};
    return kernel_result(run_kernel(bias_given_kernel, &c, PyArray_SIZE(dst)), NULL);
}

struct t5_bias_call {
    const void *table;
    int table_dtype, bidirectional, add;
    npy_intp num_buckets, nthresh;
    const int64_t *thresh;
    int64_t q_offset;
    const struct pe_bias_dst *dst;
};

static int t5_bias_kernel(const struct pe_kernels *k, void *args, int nthreads)
{
    const struct t5_bias_call *c = args;
    return pe_t5_bias(k, c->table, c->table_dtype, c->num_buckets, c->bidirectional, c->thresh,
                      c->nthresh, c->q_offset, c->dst, c->add, nthreads);
}

PyObject *py_t5_bias(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *table_o, *dst_o, *thresh_o;
    long long q_offset;
    int bidirectional, add, single = 0;
    if (!PyArg_ParseTuple(args, "OOpOLp|p:t5_bias", &table_o, &dst_o, &bidirectional, &thresh_o,
                          &q_offset, &add, &single))
        return NULL;
    struct pe_bias_dst d;
    PyArrayObject *table = arg_float_array(table_o, "table", 2, ARG_CONTIGUOUS, 1);
    PyArrayObject *dst =
        table ? bias_target(dst_o, add ? "scores" : "out", FLOAT_OR_BF16, &d) : NULL;
    if (dst == NULL || check_q_offset(q_offset) < 0)
        return NULL;
    npy_intp nb = PyArray_DIM(table, 0);
    PyArrayObject *thresh = NULL;
    if (check_per_head(table, 1, "table", "columns", dst, &d) < 0 ||
        (thresh = check_t5(nb, bidirectional, thresh_o)) == NULL)
        return NULL;
    struct t5_bias_call c = {
        .table = PyArray_DATA(table),
        .table_dtype = pe_dtype_bf16_of(table),
        .bidirectional = bidirectional,
        .add = add,
        .num_buckets = nb,
        .nthresh = PyArray_DIM(thresh, 0),
        .thresh = (const int64_t *)PyArray_DATA(thresh),
        .q_offset = (int64_t)q_offset,
        .dst = &d,
    };
    return kernel_result(run_kernel(t5_bias_kernel, &c, single ? 0 : PyArray_SIZE(dst)), NULL);
}

struct t5_grad_call {
    struct pe_bias_dst grad;
    npy_intp num_buckets, nthresh;
    const int64_t *thresh;
    int64_t q_offset;
    int bidirectional, acc64;
    char *out;
};

static int t5_grad_kernel(const struct pe_kernels *k, void *args, int nthreads)
{
    const struct t5_grad_call *c = args;
    return pe_t5_table_grad(k, &c->grad, c->num_buckets, c->bidirectional, c->thresh, c->nthresh,
                            c->q_offset, c->acc64, c->out, nthreads);
}

PyObject *py_t5_table_grad(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *grad_o, *out_o, *thresh_o;
    long long q_offset;
    int bidirectional;
    if (!PyArg_ParseTuple(args, "OOpOL:t5_table_grad", &grad_o, &out_o, &bidirectional, &thresh_o,
                          &q_offset))
        return NULL;
    /* read only: any outer strides, elements that share bytes included */
    PyArrayObject *grad = arg_float_array(grad_o, "grad", 4, 0, 1);
    if (grad == NULL || check_q_offset(q_offset) < 0)
        return NULL;
    int dtype = pe_dtype_bf16_of(grad), acc64 = dtype == PE_F64;
    PyArrayObject *out =
        arg_array(out_o, "out", acc64 ? NPY_DOUBLE : NPY_FLOAT, 2, ARG_CONTIGUOUS | ARG_WRITE);
    if (out == NULL)
        return NULL;
    if (PyArray_DIM(grad, 1) < 1 || PyArray_DIM(grad, 2) < 1 || PyArray_DIM(grad, 3) < 1) {
        PyErr_SetString(PyExc_ValueError, "grad must have at least one head, query and key");
        return NULL;
    }
    if (PyArray_DIM(out, 1) != PyArray_DIM(grad, 1)) {
        PyErr_Format(PyExc_ValueError, "out must have %zd columns (one per head of grad), not %zd",
                     (Py_ssize_t)PyArray_DIM(grad, 1), (Py_ssize_t)PyArray_DIM(out, 1));
        return NULL;
    }
    npy_intp nb = PyArray_DIM(out, 0);
    PyArrayObject *thresh = check_t5(nb, bidirectional, thresh_o);
    if (thresh == NULL || check_no_overlap(out, "out", grad, "grad") < 0 ||
        check_no_overlap(out, "out", thresh, "thresholds") < 0)
        return NULL;
    struct t5_grad_call c = {
        .grad = {PyArray_BYTES(grad), PyArray_DIM(grad, 0), PyArray_DIM(grad, 1),
                 PyArray_DIM(grad, 2), PyArray_DIM(grad, 3), PyArray_STRIDE(grad, 0),
                 PyArray_STRIDE(grad, 1), PyArray_STRIDE(grad, 2), dtype},
        .num_buckets = nb,
        .nthresh = PyArray_DIM(thresh, 0),
        .thresh = (const int64_t *)PyArray_DATA(thresh),
        .q_offset = (int64_t)q_offset,
        .bidirectional = bidirectional,
        .acc64 = acc64,
        .out = PyArray_BYTES(out),
    };
    return kernel_result(run_kernel(t5_grad_kernel, &c, PyArray_SIZE(grad)), NULL);
}

struct t5_buckets_call {
    const int64_t *rel, *thresh;
    npy_intp n, nthresh;
    int bidirectional;
    int64_t num_buckets;
    int64_t *out;
};

static int t5_buckets_kernel(const struct pe_kernels *k, void *args, int nthreads)
{
    const struct t5_buckets_call *c = args;
    (void)k;
    return pe_t5_buckets(c->rel, c->n, c->bidirectional, c->num_buckets, c->thresh, c->nthresh,
                         c->out, nthreads);
}

PyObject *py_t5_buckets(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *rel_o, *out_o, *thresh_o;
    long long num_buckets;
    int bidirectional;
    if (!PyArg_ParseTuple(args, "OOpLO:t5_buckets", &rel_o, &out_o, &bidirectional, &num_buckets,
                          &thresh_o))
        return NULL;
    PyArrayObject *rel = arg_array(rel_o, "relative_position", NPY_INT64, 1, ARG_CONTIGUOUS);
    PyArrayObject *out =
        rel ? arg_array(out_o, "out", NPY_INT64, 1, ARG_CONTIGUOUS | ARG_WRITE) : NULL;
    PyArrayObject *thresh = out ? check_t5(num_buckets, bidirectional, thresh_o) : NULL;
    if (thresh == NULL)
        return NULL;
    if (check_out_vector(out, rel, "relative_position") < 0)
        return NULL;
    struct t5_buckets_call c = {
        .rel = (const int64_t *)PyArray_DATA(rel),
        .n = PyArray_DIM(rel, 0),
        .bidirectional = bidirectional,
        .num_buckets = (int64_t)num_buckets,
        .nthresh = PyArray_DIM(thresh, 0),
        .thresh = (const int64_t *)PyArray_DATA(thresh),
        .out = (int64_t *)PyArray_DATA(out),
    };
    return kernel_result(run_kernel(t5_buckets_kernel, &c, PyArray_SIZE(out)), NULL);
}

struct relative_positions_call {
    int64_t max_distance, q_offset;
    const struct pe_bias_dst *dst;
};

static int relative_positions_kernel(const struct pe_kernels *k, void *args, int nthreads)
{
    const struct relative_positions_call *c = args;
    return pe_relative_positions(k, c->max_distance, c->q_offset, c->dst, nthreads);
}

PyObject *py_relative_positions(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *out_o;
    long long max_distance, q_offset;
    if (!PyArg_ParseTuple(args, "OLL:relative_positions", &out_o, &max_distance, &q_offset))
        return NULL;
    struct pe_bias_dst d;
    PyArrayObject *out = bias_target(out_o, "out", NPY_INT64, &d);
    if (out == NULL || check_q_offset(q_offset) < 0)
        return NULL;
    if (d.heads != 1) {
        PyErr_SetString(PyExc_ValueError, "out must have one head");
        return NULL;
    }
    struct relative_positions_call c = {(int64_t)max_distance, (int64_t)q_offset, &d};
    return kernel_result(run_kernel(relative_positions_kernel, &c, PyArray_SIZE(out)), NULL);
}

/* A C-contiguous float64 vector of n elements (n < 0: any number >= 1,
 * what says of what) not overlapping dst; NULL with an error otherwise. */
static PyArrayObject *fire_vector(PyObject *o, const char *name, npy_intp n, const char *what,
                                  PyArrayObject *dst)
{
    PyArrayObject *a = arg_array(o, name, NPY_DOUBLE, 1, ARG_CONTIGUOUS);
    if (a == NULL)
        return NULL;
    npy_intp len = PyArray_DIM(a, 0);
    if (n < 0 ? len < 1 : len != n) {
        if (n < 0)
            PyErr_Format(PyExc_ValueError, "%s must have at least one element", name);
        else
            PyErr_Format(PyExc_ValueError, "%s must have %zd elements (%s), not %zd", name,
                         (Py_ssize_t)n, what, (Py_ssize_t)len);
        return NULL;
    }
    return check_no_overlap(dst, "scores", a, name) < 0 ? NULL : a;
}

DST_KERNEL(fire, struct pe_fire, pe_fire_rows)

PyObject *py_fire_rows(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *norm_o, *psi_o, *w1_o, *b1_o, *w2_o, *b2_o, *dst_o;
    long long q_offset;
    int causal, add;
    if (!PyArg_ParseTuple(args, "OOOOOOOLpp:fire_rows", &norm_o, &psi_o, &w1_o, &b1_o, &w2_o, &b2_o,
                          &dst_o, &q_offset, &causal, &add))
        return NULL;
    struct pe_bias_dst d;
    PyArrayObject *dst = bias_target(dst_o, add ? "scores" : "out", FLOAT_OR_BF16, &d);
    if (dst == NULL || check_q_offset(q_offset) < 0)
        return NULL;
    PyArrayObject *norm = fire_vector(norm_o, "norm", d.q_len, "one per query", dst);
    PyArrayObject *psi =
        norm ? fire_vector(psi_o, "psi", d.q_len + d.k_len - 1, "q_len + k_len - 1", dst) : NULL;
    PyArrayObject *w1 = psi ? fire_vector(w1_o, "w1", -1, NULL, dst) : NULL;
    npy_intp width = w1 ? PyArray_DIM(w1, 0) : 0;
    PyArrayObject *b1 = w1 ? fire_vector(b1_o, "b1", width, "one per row of w1", dst) : NULL;
    PyArrayObject *w2 = b1 ? arg_array(w2_o, "w2", NPY_DOUBLE, 2, ARG_CONTIGUOUS) : NULL;
    if (w2 == NULL || check_per_head(w2, 0, "w2", "rows", dst, &d) < 0)
        return NULL;
    if (PyArray_DIM(w2, 1) != width) {
        PyErr_Format(PyExc_ValueError, "w2 must have %zd columns (one per element of w1), not %zd",
                     (Py_ssize_t)width, (Py_ssize_t)PyArray_DIM(w2, 1));
        return NULL;
    }
    PyArrayObject *b2 = fire_vector(b2_o, "b2", d.heads, "one per head", dst);
    if (b2 == NULL)
        return NULL;
    struct fire_call c = {{(const double *)PyArray_DATA(norm), (const double *)PyArray_DATA(psi),
                           (const double *)PyArray_DATA(w1), (const double *)PyArray_DATA(b1),
                           (const double *)PyArray_DATA(w2), (const double *)PyArray_DATA(b2),
                           width, d.heads, (int64_t)q_offset, causal, 0},
                          add,
                          &d};
    return kernel_result(run_kernel(fire_kernel, &c, PyArray_SIZE(dst)), NULL);
}
