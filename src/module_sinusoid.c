/*
 * module_sinusoid.c -- posenc._core.sinusoid: its arguments checked, then
 * pe_sinusoid (sinusoid.c).
 */
#include "module.h"

/* ---- sinusoid ---- */

struct sinusoid_call {
    const double *pos, *freq;
    npy_intp n, half, row_stride;
    int layout, dtype;
    char *out;
};

static int sinusoid_kernel(const struct pe_kernels *k, void *args, int nthreads)
{
    const struct sinusoid_call *c = args;
    return pe_sinusoid(k, c->pos, c->n, c->freq, c->half, c->layout, c->dtype, c->out,
                       c->row_stride, nthreads);
}

PyObject *py_sinusoid(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *pos_o, *freq_o, *out_o;
    int layout;
    if (!PyArg_ParseTuple(args, "OOOi:sinusoid", &pos_o, &freq_o, &out_o, &layout))
        return NULL;
    PyArrayObject *pos = arg_array(pos_o, "positions", NPY_DOUBLE, 1, ARG_CONTIGUOUS);
    PyArrayObject *freq = pos ? arg_array(freq_o, "freq", NPY_DOUBLE, 1, ARG_CONTIGUOUS) : NULL;
    PyArrayObject *out = freq ? arg_float_out(out_o, "out", 2, 1) : NULL;
    if (out == NULL)
        return NULL;
    if (layout != PE_INTERLEAVED && layout != PE_CONCAT) {
        PyErr_SetString(PyExc_ValueError, "layout must be 0 (interleaved) or 1 (concat)");
        return NULL;
    }
    npy_intp n = PyArray_DIM(pos, 0), half = PyArray_DIM(freq, 0);
    if (PyArray_DIM(out, 0) != n || PyArray_DIM(out, 1) != 2 * half) {
        PyErr_Format(PyExc_ValueError, "out must have shape (%zd, %zd)", (Py_ssize_t)n,
                     (Py_ssize_t)(2 * half));
        return NULL;
    }
    if (check_no_overlap(out, "out", pos, "positions") < 0 ||
        check_no_overlap(out, "out", freq, "freq") < 0)
        return NULL;

    struct sinusoid_call c = {
        .pos = (const double *)PyArray_DATA(pos),
        .freq = (const double *)PyArray_DATA(freq),
        .n = n,
        .half = half,
        .row_stride = PyArray_STRIDE(out, 0),
        .layout = layout,
        .dtype = pe_dtype_bf16_of(out),
        .out = PyArray_BYTES(out),
    };
    return kernel_result(run_kernel(sinusoid_kernel, &c, PyArray_SIZE(out)), NULL);
}
