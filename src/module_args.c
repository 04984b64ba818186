/*
 * module_args.c -- the checks of posenc._core's arguments: every array a
 * method is handed (type, rank, alignment, byte order, writeability,
 * contiguity, overlap) before any kernel runs, so that the extension is
 * memory-safe when called directly and not only behind posenc's Python
 * layer, and NumPy's types as the kernels' enum pe_dtype.
 */
#include "module.h"
/* `obj` as an ndarray of the given type and rank, aligned, native byte
 * order, with a contiguous last axis (fully contiguous with ARG_CONTIGUOUS),
 * writeable with ARG_WRITE.  Returns a borrowed pointer or NULL with a
 * TypeError/ValueError naming the argument. */
PyArrayObject *arg_array(PyObject *obj, const char *name, int typenum, int ndim, int flags)
{
    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a numpy.ndarray, not %.200s", name,
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    PyArrayObject *a = (PyArrayObject *)obj;
    if (PyArray_TYPE(a) != typenum || !PyArray_ISNOTSWAPPED(a)) {
        PyArray_Descr *want = PyArray_DescrFromType(typenum);
        PyErr_Format(PyExc_TypeError, "%s must have native dtype %R, not %R", name,
                     (PyObject *)want, (PyObject *)PyArray_DESCR(a));
        Py_XDECREF(want);
        return NULL;
    }
    if (PyArray_NDIM(a) != ndim) {
        PyErr_Format(PyExc_ValueError, "%s must be %d-dimensional, not %d-dimensional", name, ndim,
                     PyArray_NDIM(a));
        return NULL;
    }
    if (!PyArray_ISALIGNED(a)) {
        PyErr_Format(PyExc_ValueError, "%s must be aligned", name);
        return NULL;
    }
    if ((flags & ARG_WRITE) && !PyArray_ISWRITEABLE(a)) {
        PyErr_Format(PyExc_ValueError, "%s must be writeable", name);
        return NULL;
    }
    int contiguous = (flags & ARG_CONTIGUOUS)
                         ? PyArray_IS_C_CONTIGUOUS(a)
                         : (ndim == 0 || PyArray_DIM(a, ndim - 1) <= 1 ||
                            PyArray_STRIDE(a, ndim - 1) == PyArray_ITEMSIZE(a));
    if (!contiguous) {
        PyErr_Format(PyExc_ValueError, "%s must be %s", name,
                     (flags & ARG_CONTIGUOUS) ? "C-contiguous" : "contiguous along its last axis");
        return NULL;
    }
    return a;
}

/* Byte range [lo, hi) that the elements of `a` occupy. */
static void byte_extent(PyArrayObject *a, char **lo, char **hi)
{
    char *l = PyArray_BYTES(a), *h = PyArray_BYTES(a);
    if (PyArray_SIZE(a) == 0) {
        *lo = *hi = l;
        return;
    }
    for (int d = 0; d < PyArray_NDIM(a); ++d) {
        npy_intp span = (PyArray_DIM(a, d) - 1) * PyArray_STRIDE(a, d);
        if (span < 0)
            l += span;
        else
            h += span;
    }
    *lo = l;
    *hi = h + PyArray_ITEMSIZE(a);
}

/* Fails with a ValueError if `out` shares bytes with `in`. */
int check_no_overlap(PyArrayObject *out, const char *out_name, PyArrayObject *in,
                     const char *in_name)
{
    char *ol, *oh, *il, *ih;
    byte_extent(out, &ol, &oh);
    byte_extent(in, &il, &ih);
    if (ol < ih && il < oh) {
        PyErr_Format(PyExc_ValueError, "%s must not overlap %s", out_name, in_name);
        return -1;
    }
    return 0;
}

int check_out_vector(PyArrayObject *out, PyArrayObject *in, const char *in_name)
{
    if (PyArray_DIM(out, 0) != PyArray_DIM(in, 0)) {
        PyErr_Format(PyExc_ValueError, "out must have the length of %s", in_name);
        return -1;
    }
    return check_no_overlap(out, "out", in, in_name);
}

/* The element types' NumPy types, from the one list of them (pe.h). */
#define NPY_TYPE_CASE(s, E, ctype, npy, ...)                                                       \
    case npy:                                                                                      \
        return E;

int pe_dtype_bf16_of(PyArrayObject *a)
{
    switch (PyArray_TYPE(a)) {
        PE_DTYPES(NPY_TYPE_CASE, ~)
    default:
        return -1;
    }
}

int pe_dtype_of(PyArrayObject *a)
{
    int dtype = pe_dtype_bf16_of(a);
    return dtype == PE_BF16 ? -1 : dtype;
}

PyArrayObject *arg_float_array(PyObject *obj, const char *name, int ndim, int flags, int bf16)
{
    if (!PyArray_Check(obj) ||
        (bf16 ? pe_dtype_bf16_of((PyArrayObject *)obj) : pe_dtype_of((PyArrayObject *)obj)) < 0) {
        PyErr_Format(PyExc_TypeError, "%s must be a numpy.ndarray of float16, float32%s", name,
                     bf16 ? ", float64 or uint16 (the bits of bfloat16)" : " or float64");
        return NULL;
    }
    return arg_array(obj, name, PyArray_TYPE((PyArrayObject *)obj), ndim, flags);
}

/* An output array: float16/32/64 (and with bf16 set, uint16 holding
 * bfloat16), rank ndim, rest as arg_array. */
PyArrayObject *arg_float_out(PyObject *obj, const char *name, int ndim, int bf16)
{
    if (PyArray_Check(obj) &&
        (bf16 ? pe_dtype_bf16_of((PyArrayObject *)obj) : pe_dtype_of((PyArrayObject *)obj)) >= 0)
        return arg_array(obj, name, PyArray_TYPE((PyArrayObject *)obj), ndim, ARG_WRITE);
    if (!PyArray_Check(obj))
        return arg_array(obj, name, NPY_DOUBLE, ndim, ARG_WRITE);
    PyErr_Format(PyExc_TypeError, "%s must have dtype float16, float32 or float64%s, not %R", name,
                 bf16 ? " (or uint16, the bits of bfloat16)" : "",
                 (PyObject *)PyArray_DESCR((PyArrayObject *)obj));
    return NULL;
}

/* 4-D (batch, heads, q, k) target of a bias kernel: an ndarray of the given
 * type (-1: float16/32/64, FLOAT_OR_BF16), rest as arg_array, q and k >= 1,
 * and elements that do not overlap one another (the kernel writes each
 * once, from several threads).  Fills *d; returns the array or NULL with an
 * error. */
PyArrayObject *bias_target(PyObject *obj, const char *name, int typenum, struct pe_bias_dst *d)
{
    PyArrayObject *a = typenum < 0 ? arg_float_out(obj, name, 4, typenum == FLOAT_OR_BF16)
                                   : arg_array(obj, name, typenum, 4, ARG_WRITE);
    if (a == NULL)
        return NULL;
    if (PyArray_DIM(a, 2) < 1 || PyArray_DIM(a, 3) < 1 || PyArray_DIM(a, 1) < 1) {
        PyErr_Format(PyExc_ValueError, "%s must have at least one head, query and key", name);
        return NULL;
    }
    /* no overlap: outer axes sorted by |stride| each step past the extent
     * of the ones inside them */
    npy_intp ext = PyArray_DIM(a, 3) * PyArray_ITEMSIZE(a);
    npy_intp st[3], n[3];
    int m = 0;
    for (int ax = 0; ax < 3; ++ax) {
        if (PyArray_DIM(a, ax) > 1) {
            npy_intp s = PyArray_STRIDE(a, ax);
            st[m] = s < 0 ? -s : s;
            n[m++] = PyArray_DIM(a, ax);
        }
    }
    for (int x = 1; x < m; ++x)
        for (int y = x; y > 0 && st[y] < st[y - 1]; --y) {
            npy_intp ts = st[y], tn = n[y];
            st[y] = st[y - 1], n[y] = n[y - 1];
            st[y - 1] = ts, n[y - 1] = tn;
        }
    for (int x = 0; x < m; ++x) {
        if (st[x] < ext) {
            PyErr_Format(PyExc_ValueError, "%s must not have overlapping elements", name);
            return NULL;
        }
        ext = st[x] * n[x];
    }
    d->data = PyArray_BYTES(a);
    d->batch = PyArray_DIM(a, 0);
    d->heads = PyArray_DIM(a, 1);
    d->q_len = PyArray_DIM(a, 2);
    d->k_len = PyArray_DIM(a, 3);
    d->stride_b = PyArray_STRIDE(a, 0);
    d->stride_h = PyArray_STRIDE(a, 1);
    d->stride_q = PyArray_STRIDE(a, 2);
    d->dtype = typenum == NPY_INT64 ? PE_BIAS_I64 : pe_dtype_bf16_of(a);
    return a;
}
