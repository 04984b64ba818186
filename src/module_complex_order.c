/*
 * module_complex_order.c -- posenc._core.complex_order: its arguments
 * checked, then pe_complex_order (complex_order.c).
 */
#include "module.h"

#include "complex_order.h"

struct complex_order_call {
    struct pe_complex_order c;
    unsigned bad;
};

static int complex_order_kernel(const struct pe_kernels *k, void *args, int nthreads)
{
    struct complex_order_call *call = args;
    return pe_complex_order(k, &call->c, nthreads, &call->bad);
}

/* A table (vocab, dim) of dtype: its array, or NULL with an error. */
static PyArrayObject *co_table(PyObject *obj, const char *name, int dtype, npy_intp vocab,
                               npy_intp dim)
{
    PyArrayObject *a = arg_float_array(obj, name, 2, 0, 0);
    if (a == NULL)
        return NULL;
    if (pe_dtype_of(a) != dtype || PyArray_DIM(a, 0) != vocab || PyArray_DIM(a, 1) != dim) {
        PyErr_Format(PyExc_ValueError,
                     "%s must have amplitude's dtype and shape (%zd, %zd), not %R of shape "
                     "(%zd, %zd)",
                     name, (Py_ssize_t)vocab, (Py_ssize_t)dim, (PyObject *)PyArray_DESCR(a),
                     (Py_ssize_t)PyArray_DIM(a, 0), (Py_ssize_t)PyArray_DIM(a, 1));
        return NULL;
    }
    return a;
}

/* The parts: out (n, dim) of dtype, C-contiguous, writeable, sharing no
 * byte with the inputs. */
static PyArrayObject *co_out(PyObject *obj, const char *name, npy_intp n, npy_intp dim,
                             PyArrayObject **inputs, const char **names)
{
    PyArrayObject *o = arg_array(obj, name, PyArray_TYPE(inputs[2]), 2, ARG_WRITE | ARG_CONTIGUOUS);
    if (o == NULL)
        return NULL;
    if (PyArray_DIM(o, 0) != n || PyArray_DIM(o, 1) != dim) {
        PyErr_Format(PyExc_ValueError, "%s must have shape (%zd, %zd)", name, (Py_ssize_t)n,
                     (Py_ssize_t)dim);
        return NULL;
    }
    for (int i = 0; i < 5; ++i)
        if (check_no_overlap(o, name, inputs[i], names[i]) < 0)
            return NULL;
    return o;
}

PyObject *py_complex_order(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *ids_o, *pos_o, *amp_o, *freq_o, *phase_o, *re_o, *im_o;
    if (!PyArg_ParseTuple(args, "OOOOOOO:complex_order", &ids_o, &pos_o, &amp_o, &freq_o, &phase_o,
                          &re_o, &im_o))
        return NULL;
    PyArrayObject *ids = arg_array(ids_o, "token_ids", NPY_INT64, 1, ARG_CONTIGUOUS);
    PyArrayObject *pos = ids ? arg_array(pos_o, "positions", NPY_DOUBLE, 1, ARG_CONTIGUOUS) : NULL;
    PyArrayObject *amp = pos ? arg_float_array(amp_o, "amplitude", 2, 0, 0) : NULL;
    if (amp == NULL)
        return NULL;
    const int dtype = pe_dtype_of(amp);
    const npy_intp n = PyArray_DIM(ids, 0), vocab = PyArray_DIM(amp, 0), dim = PyArray_DIM(amp, 1);
    PyArrayObject *freq = co_table(freq_o, "frequency", dtype, vocab, dim);
    PyArrayObject *phase = freq ? co_table(phase_o, "phase", dtype, vocab, dim) : NULL;
    if (phase == NULL)
        return NULL;
    if (PyArray_DIM(pos, 0) != n) {
        PyErr_Format(PyExc_ValueError, "positions must have shape (%zd,)", (Py_ssize_t)n);
        return NULL;
    }
    PyArrayObject *inputs[5] = {ids, pos, amp, freq, phase};
    const char *names[5] = {"token_ids", "positions", "amplitude", "frequency", "phase"};
    /* im None: re holds (real, imag) pairs, a complex array's bytes */
    const int interleaved = im_o == Py_None;
    PyArrayObject *re =
        co_out(re_o, interleaved ? "out" : "real", n, interleaved ? 2 * dim : dim, inputs, names);
    PyArrayObject *im = re == NULL    ? NULL
                        : interleaved ? re
                                      : co_out(im_o, "imag", n, dim, inputs, names);
    if (im == NULL)
        return NULL;
    if (!interleaved && check_no_overlap(im, "imag", re, "real") < 0)
        return NULL;
    const int64_t *id = (const int64_t *)PyArray_DATA(ids);
    for (npy_intp t = 0; t < n; ++t)
        if (id[t] < 0 || id[t] >= vocab) {
            PyErr_Format(PyExc_ValueError, "token_ids must be in [0, %zd) (the tables' rows)",
                         (Py_ssize_t)vocab);
            return NULL;
        }
    const double *p = (const double *)PyArray_DATA(pos);
    for (npy_intp t = 0; t < n; ++t)
        if (!isfinite(p[t])) {
            PyErr_SetString(PyExc_ValueError, "positions must be finite (found nan or inf)");
            return NULL;
        }
    struct complex_order_call call = {
        .c =
            {
                .ids = id,
                .pos = p,
                .n = n,
                .dim = dim,
                .amp = PyArray_BYTES(amp),
                .freq = PyArray_BYTES(freq),
                .phase = PyArray_BYTES(phase),
                .amp_stride = PyArray_STRIDE(amp, 0),
                .freq_stride = PyArray_STRIDE(freq, 0),
                .phase_stride = PyArray_STRIDE(phase, 0),
                .re = PyArray_BYTES(re),
                .im = PyArray_BYTES(im),
                .interleaved = interleaved,
                .dtype = dtype,
            },
        .bad = 0,
    };
    int rc = run_kernel(complex_order_kernel, &call, 2 * n * dim);
    if (rc == -2) {
        const char *name = (call.bad & PE_CO_BAD_AMP)    ? "amplitude"
                           : (call.bad & PE_CO_BAD_FREQ) ? "frequency"
                                                         : "phase";
        PyErr_Format(PyExc_ValueError,
                     "%s must be finite in the rows token_ids use (found nan or inf)", name);
        return NULL;
    }
    return kernel_result(rc, NULL);
}
