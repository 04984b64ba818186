/*
 * module_cope.c -- posenc._core's cope: CoPE's position logits added into
 * attention scores or written, its arguments checked, then the entry point
 * of cope.c.  The gates come from the logits, or with gates=True are
 * given (posenc/cope.py makes them by cope_gates, also here, where the
 * kernel is not used).
 */
#include "module.h"

struct cope_call {
    struct pe_cope c;
    struct pe_bias_dst d;
};

static int cope_kernel(const struct pe_kernels *k, void *args, int nthreads)
{
    struct cope_call *call = args;
    return pe_cope(k, &call->c, nthreads);
}

/* The same shape as dst's (batch, heads, q_len, k_len): 0, or -1 with a
 * ValueError naming the argument. */
static int check_cope_shape(PyArrayObject *a, const char *name, const struct pe_bias_dst *d)
{
    const npy_intp *s = PyArray_DIMS(a);
    if (s[0] != d->batch || s[1] != d->heads || s[2] != d->q_len || s[3] != d->k_len) {
        PyErr_Format(PyExc_ValueError,
                     "%s must have the shape of the scores, (%zd, %zd, %zd, %zd), not (%zd, %zd, "
                     "%zd, %zd)",
                     name, (Py_ssize_t)d->batch, (Py_ssize_t)d->heads, (Py_ssize_t)d->q_len,
                     (Py_ssize_t)d->k_len, (Py_ssize_t)s[0], (Py_ssize_t)s[1], (Py_ssize_t)s[2],
                     (Py_ssize_t)s[3]);
        return -1;
    }
    return 0;
}

/* The scores may be the logits themselves (each row's logits are read
 * before its scores are written), no other array that shares their bytes. */
static int check_cope_overlap(PyArrayObject *dst, const char *name, PyArrayObject *logits,
                              const char *lname)
{
    if (PyArray_DATA(dst) == PyArray_DATA(logits) && PyArray_TYPE(dst) == PyArray_TYPE(logits)) {
        int same = 1;
        for (int a = 0; a < 4; ++a)
            same &= PyArray_STRIDE(dst, a) == PyArray_STRIDE(logits, a);
        if (same)
            return 0;
    }
    return check_no_overlap(dst, name, logits, lname);
}

PyObject *py_cope(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *logits_o, *q_o, *et_o, *dst_o;
    int causal, add, gates = 0;
    long long q_offset;
    if (!PyArg_ParseTuple(args, "OOOOpLp|p:cope", &logits_o, &q_o, &et_o, &dst_o, &causal,
                          &q_offset, &add, &gates))
        return NULL;
    const char *name = add ? "scores" : "out", *lname = gates ? "gates" : "attn_logits";
    struct cope_call call;
    PyArrayObject *logits = gates ? arg_array(logits_o, lname, NPY_DOUBLE, 4, 0)
                                  : arg_float_array(logits_o, lname, 4, 0, 0);
    PyArrayObject *q = logits ? arg_float_array(q_o, "query", 2, 0, 0) : NULL;
    PyArrayObject *et = q ? arg_array(et_o, "pos_emb", NPY_DOUBLE, 2, ARG_CONTIGUOUS) : NULL;
    PyArrayObject *dst = et ? bias_target(dst_o, name, -1, &call.d) : NULL;
    if (dst == NULL || check_cope_shape(logits, lname, &call.d) < 0)
        return NULL;
    const npy_intp rows = call.d.batch * call.d.heads * call.d.q_len, d = PyArray_DIM(q, 1);
    if (PyArray_DIM(q, 0) != rows || d < 1 || PyArray_DIM(et, 0) != d || PyArray_DIM(et, 1) < 1) {
        PyErr_Format(PyExc_ValueError,
                     "query must have shape (%zd, d) with d >= 1 (a query per row of the scores) "
                     "and pos_emb (d, npos) with npos >= 1, not (%zd, %zd) and (%zd, %zd)",
                     (Py_ssize_t)rows, (Py_ssize_t)PyArray_DIM(q, 0), (Py_ssize_t)d,
                     (Py_ssize_t)PyArray_DIM(et, 0), (Py_ssize_t)PyArray_DIM(et, 1));
        return NULL;
    }
    if (q_offset < -PE_MAX_Q_OFFSET || q_offset > PE_MAX_Q_OFFSET) {
        PyErr_SetString(PyExc_ValueError, "q_offset must be between -2**53 and 2**53");
        return NULL;
    }
    if (check_cope_overlap(dst, name, logits, lname) < 0 ||
        check_no_overlap(dst, name, q, "query") < 0 ||
        check_no_overlap(dst, name, et, "pos_emb") < 0)
        return NULL;
    call.c = (struct pe_cope){
        .logits = call.d,
        .dst = &call.d,
        .query = PyArray_BYTES(q),
        .query_stride = PyArray_STRIDE(q, 0),
        .d = d,
        .query_dtype = pe_dtype_of(q),
        .et = (const double *)PyArray_DATA(et),
        .npos = PyArray_DIM(et, 1),
        .q_offset = (int64_t)q_offset,
        .causal = causal,
        .add = add,
        .gates = gates,
    };
    call.c.logits.data = PyArray_BYTES(logits);
    call.c.logits.stride_b = PyArray_STRIDE(logits, 0);
    call.c.logits.stride_h = PyArray_STRIDE(logits, 1);
    call.c.logits.stride_q = PyArray_STRIDE(logits, 2);
    call.c.logits.dtype = pe_dtype_of(logits);
    return kernel_result(run_kernel(cope_kernel, &call, PyArray_SIZE(dst)),
                         gates ? "gates must not be nan or +inf"
                               : "attn_logits must be finite or -inf (masked), found nan or +inf");
}

struct cope_gates_call {
    const double *a;
    double *g;
    ptrdiff_t n;
    int exp_only;
};

static int cope_gates_kernel(const struct pe_kernels *k, void *args, int nthreads)
{
    (void)k;
    struct cope_gates_call *call = args;
    pe_cope_gates(call->a, call->g, call->n, call->exp_only, nthreads);
    return 0;
}

PyObject *py_cope_gates(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *a_o, *g_o;
    int exp_only = 0;
    if (!PyArg_ParseTuple(args, "OO|p:cope_gates", &a_o, &g_o, &exp_only))
        return NULL;
    PyArrayObject *a = arg_array(a_o, "attn_logits", NPY_DOUBLE, 1, ARG_CONTIGUOUS);
    PyArrayObject *g =
        a ? arg_array(g_o, "gates", NPY_DOUBLE, 1, ARG_CONTIGUOUS | ARG_WRITE) : NULL;
    if (g == NULL)
        return NULL;
    if (PyArray_DIM(g, 0) != PyArray_DIM(a, 0)) {
        PyErr_Format(PyExc_ValueError, "gates must have attn_logits' length %zd, not %zd",
                     (Py_ssize_t)PyArray_DIM(a, 0), (Py_ssize_t)PyArray_DIM(g, 0));
        return NULL;
    }
    if (check_no_overlap(g, "gates", a, "attn_logits") < 0)
        return NULL;
    if (exp_only) { /* its domain: x <= 0 (or nan) */
        const double *x = PyArray_DATA(a);
        for (npy_intp t = 0; t < PyArray_DIM(a, 0); ++t)
            if (x[t] > 0) {
                PyErr_SetString(PyExc_ValueError, "attn_logits must be <= 0 with exp_only");
                return NULL;
            }
    }
    struct cope_gates_call call = {PyArray_DATA(a), PyArray_DATA(g), PyArray_DIM(a, 0), exp_only};
    return kernel_result(run_kernel(cope_gates_kernel, &call, call.n), "");
}

struct cope_products_call {
    const double *q, *et;
    double *z;
    ptrdiff_t rows, d, npos;
};

static int cope_products_kernel(const struct pe_kernels *k, void *args, int nthreads)
{
    struct cope_products_call *c = args;
    pe_cope_products(k, c->q, c->et, c->rows, c->d, c->npos, c->z, nthreads);
    return 0;
}

PyObject *py_cope_products(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *q_o, *et_o, *z_o;
    if (!PyArg_ParseTuple(args, "OOO:cope_products", &q_o, &et_o, &z_o))
        return NULL;
    PyArrayObject *q = arg_array(q_o, "query", NPY_DOUBLE, 2, ARG_CONTIGUOUS);
    PyArrayObject *et = q ? arg_array(et_o, "pos_emb", NPY_DOUBLE, 2, ARG_CONTIGUOUS) : NULL;
    PyArrayObject *z = et ? arg_array(z_o, "z", NPY_DOUBLE, 2, ARG_CONTIGUOUS | ARG_WRITE) : NULL;
    if (z == NULL)
        return NULL;
    const npy_intp rows = PyArray_DIM(q, 0), d = PyArray_DIM(q, 1), npos = PyArray_DIM(et, 1);
    if (d < 1 || PyArray_DIM(et, 0) != d || PyArray_DIM(z, 0) != rows ||
        PyArray_DIM(z, 1) != npos) {
        PyErr_Format(PyExc_ValueError,
                     "query (rows, d), pos_emb (d, npos) and z (rows, npos) must agree, d >= 1; "
                     "got (%zd, %zd), (%zd, %zd) and (%zd, %zd)",
                     (Py_ssize_t)rows, (Py_ssize_t)d, (Py_ssize_t)PyArray_DIM(et, 0),
                     (Py_ssize_t)npos, (Py_ssize_t)PyArray_DIM(z, 0),
                     (Py_ssize_t)PyArray_DIM(z, 1));
        return NULL;
    }
    if (check_no_overlap(z, "z", q, "query") < 0 || check_no_overlap(z, "z", et, "pos_emb") < 0)
        return NULL;
    struct cope_products_call call = {
        PyArray_DATA(q), PyArray_DATA(et), PyArray_DATA(z), rows, d, npos};
    return kernel_result(run_kernel(cope_products_kernel, &call, rows * npos), "");
}

static int cope_grad_kernel(const struct pe_kernels *k, void *args, int nthreads)
{
    return pe_cope_grad(k, args, nthreads);
}

/* 2-D a of `rows` x `cols`: 0, or -1 with a ValueError naming it. */
static int check_rows(PyArrayObject *a, const char *name, npy_intp rows, npy_intp cols)
{
    if (PyArray_DIM(a, 0) != rows || PyArray_DIM(a, 1) != cols) {
        PyErr_Format(PyExc_ValueError, "%s must have shape (%zd, %zd), not (%zd, %zd)", name,
                     (Py_ssize_t)rows, (Py_ssize_t)cols, (Py_ssize_t)PyArray_DIM(a, 0),
                     (Py_ssize_t)PyArray_DIM(a, 1));
        return -1;
    }
    return 0;
}

PyObject *py_cope_grad(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *logits_o, *grad_o, *q_o, *et_o, *table_o, *dl_o, *dq_o, *dt_o;
    Py_ssize_t q_len;
    int causal;
    long long q_offset;
    if (!PyArg_ParseTuple(args, "OOOOOOOOnpL:cope_grad", &logits_o, &grad_o, &q_o, &et_o, &table_o,
                          &dl_o, &dq_o, &dt_o, &q_len, &causal, &q_offset))
        return NULL;
    PyArrayObject *logits = arg_float_array(logits_o, "attn_logits", 2, 0, 0);
    PyArrayObject *grad = logits ? arg_float_array(grad_o, "grad", 2, 0, 0) : NULL;
    PyArrayObject *q = grad ? arg_float_array(q_o, "query", 2, 0, 0) : NULL;
    PyArrayObject *et = q ? arg_array(et_o, "pos_emb", NPY_DOUBLE, 2, ARG_CONTIGUOUS) : NULL;
    PyArrayObject *table = et ? arg_array(table_o, "table", NPY_DOUBLE, 2, ARG_CONTIGUOUS) : NULL;
    PyArrayObject *dl = table ? arg_float_out(dl_o, "d_logits", 2, 0) : NULL;
    PyArrayObject *dq = dl ? arg_float_out(dq_o, "d_query", 2, 0) : NULL;
    PyArrayObject *dt =
        dq ? arg_array(dt_o, "d_table", NPY_DOUBLE, 2, ARG_CONTIGUOUS | ARG_WRITE) : NULL;
    if (dt == NULL)
        return NULL;
    const npy_intp rows = PyArray_DIM(logits, 0), k_len = PyArray_DIM(logits, 1);
    const npy_intp d = PyArray_DIM(q, 1), npos = PyArray_DIM(et, 1);
    if (q_len < 1 || rows % q_len != 0) {
        PyErr_Format(PyExc_ValueError,
                     "q_len must be >= 1 and divide the rows of attn_logits (%zd), not %zd",
                     (Py_ssize_t)rows, (Py_ssize_t)q_len);
        return NULL;
    }
    if (k_len < 1 || d < 1 || npos < 1 || PyArray_DIM(et, 0) != d) {
        PyErr_Format(PyExc_ValueError,
                     "attn_logits (rows, k_len), query (rows, d) and pos_emb (d, npos) must agree "
                     "with k_len, d and npos >= 1; got (%zd, %zd), (%zd, %zd) and (%zd, %zd)",
                     (Py_ssize_t)rows, (Py_ssize_t)k_len, (Py_ssize_t)PyArray_DIM(q, 0),
                     (Py_ssize_t)d, (Py_ssize_t)PyArray_DIM(et, 0), (Py_ssize_t)npos);
        return NULL;
    }
    if (check_rows(grad, "grad", rows, k_len) < 0 || check_rows(q, "query", rows, d) < 0 ||
        check_rows(table, "table", npos, d) < 0 || check_rows(dl, "d_logits", rows, k_len) < 0 ||
        check_rows(dq, "d_query", rows, d) < 0 || check_rows(dt, "d_table", npos, d) < 0)
        return NULL;
    if (q_offset < -(long long)q_len || q_offset > (long long)k_len) {
        PyErr_Format(PyExc_ValueError, "q_offset must be between -q_len (%zd) and k_len (%zd)",
                     (Py_ssize_t)q_len, (Py_ssize_t)k_len);
        return NULL;
    }
    PyArrayObject *ins[] = {logits, grad, q, et, table};
    const char *in_names[] = {"attn_logits", "grad", "query", "pos_emb", "table"};
    PyArrayObject *outs[] = {dl, dq, dt};
    const char *out_names[] = {"d_logits", "d_query", "d_table"};
    for (int o = 0; o < 3; ++o) {
        for (int t = 0; t < 5; ++t)
            if (check_no_overlap(outs[o], out_names[o], ins[t], in_names[t]) < 0)
                return NULL;
        for (int t = o + 1; t < 3; ++t)
            if (check_no_overlap(outs[t], out_names[t], outs[o], out_names[o]) < 0)
                return NULL;
    }
    struct pe_cope_grad call = {
        .logits = PyArray_BYTES(logits),
        .grad = PyArray_BYTES(grad),
        .d_logits = PyArray_BYTES(dl),
        .d_query = PyArray_BYTES(dq),
        .rows = rows,
        .q_len = q_len,
        .k_len = k_len,
        .lstride = PyArray_STRIDE(logits, 0),
        .gstride = PyArray_STRIDE(grad, 0),
        .dstride = PyArray_STRIDE(dl, 0),
        .dq_stride = PyArray_STRIDE(dq, 0),
        .logits_dtype = pe_dtype_of(logits),
        .grad_dtype = pe_dtype_of(grad),
        .d_dtype = pe_dtype_of(dl),
        .dq_dtype = pe_dtype_of(dq),
        .query = PyArray_BYTES(q),
        .query_stride = PyArray_STRIDE(q, 0),
        .d = d,
        .query_dtype = pe_dtype_of(q),
        .et = (const double *)PyArray_DATA(et),
        .table = (const double *)PyArray_DATA(table),
        .npos = npos,
        .q_offset = (int64_t)q_offset,
        .causal = causal,
        .d_table = (double *)PyArray_DATA(dt),
    };
    const int rc = run_kernel(cope_grad_kernel, &call, rows * k_len);
    return kernel_result(rc, rc == -3 ? "grad must be finite (found nan or inf)"
                                      : "attn_logits must be finite or -inf (masked), found nan "
                                        "or +inf");
}
