/*
 * module.c -- posenc._core, the only file that knows about Python.
 *
 * Each entry point checks every object it is handed (type, rank, shape,
 * alignment, byte order, writeability, overlap) before any kernel runs, so
 * that the extension is memory-safe when called directly and not only behind
 * posenc's Python layer, then releases the GIL and calls a kernel on plain
 * pointers.  The Python layer does the user-facing conversions (any array-
 * like, any layout) and hands over arrays in the form checked here.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "pe.h"
#include "simd.h"

int pe_simd_level = PE_SIMD_SCALAR;

static const char *const simd_names[] = {"scalar", "avx2"};

/* ---- threads ---- */

/* 0: follow OpenMP (OMP_NUM_THREADS, threadpoolctl); > 0: set by the user. */
static int threads_requested = 0;

static int effective_threads(void)
{
#ifdef _OPENMP
    return threads_requested > 0 ? threads_requested : omp_get_max_threads();
#else
    return 1;
#endif
}

static PyObject *py_set_num_threads(PyObject *self, PyObject *arg)
{
    (void)self;
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 0 || n > 4096) {
        PyErr_SetString(PyExc_ValueError, "n must be between 0 and 4096 (0 follows OpenMP)");
        return NULL;
    }
    threads_requested = (int)n;
    Py_RETURN_NONE;
}

static PyObject *py_get_num_threads(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    return PyLong_FromLong(effective_threads());
}

/* ---- SIMD ---- */

static PyObject *py_simd_path(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    return PyUnicode_FromString(simd_names[pe_simd_level]);
}

static PyObject *py_simd_cpu(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    return PyUnicode_FromString(simd_names[pe_simd_cpu_best()]);
}

/* Select "scalar", "avx2" (if the CPU has it) or "auto"; returns the path
 * now in use.  The environment variable POSENC_SIMD goes through here at
 * import; tests call it to run both paths in one process. */
static int select_simd(const char *name)
{
    int best = pe_simd_cpu_best();
    if (name == NULL || name[0] == '\0' || strcmp(name, "auto") == 0)
        pe_simd_level = best;
    else if (strcmp(name, "scalar") == 0)
        pe_simd_level = PE_SIMD_SCALAR;
    else if (strcmp(name, "avx2") == 0)
        pe_simd_level = best >= PE_SIMD_AVX2 ? PE_SIMD_AVX2 : PE_SIMD_SCALAR;
    else
        return -1;
    return 0;
}

static PyObject *py_set_simd(PyObject *self, PyObject *arg)
{
    (void)self;
    const char *name = PyUnicode_AsUTF8(arg);
    if (name == NULL)
        return NULL;
    if (select_simd(name) < 0) {
        PyErr_Format(PyExc_ValueError, "simd must be 'auto', 'scalar' or 'avx2', not '%s'", name);
        return NULL;
    }
    return PyUnicode_FromString(simd_names[pe_simd_level]);
}

/* ---- argument checks ---- */

enum { ARG_WRITE = 1, ARG_CONTIGUOUS = 2 };

/* `obj` as an ndarray of the given type and rank, aligned, native byte
 * order, with a contiguous last axis (fully contiguous with ARG_CONTIGUOUS),
 * writeable with ARG_WRITE.  Returns a borrowed pointer or NULL with a
 * TypeError/ValueError naming the argument. */
static PyArrayObject *arg_array(PyObject *obj, const char *name, int typenum, int ndim, int flags)
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
static int check_no_overlap(PyArrayObject *out, const char *out_name, PyArrayObject *in,
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

/* The kernel's element type for a NumPy float type, or -1. */
static int pe_dtype_of(PyArrayObject *a)
{
    switch (PyArray_TYPE(a)) {
    case NPY_HALF:
        return PE_F16;
    case NPY_FLOAT:
        return PE_F32;
    case NPY_DOUBLE:
        return PE_F64;
    default:
        return -1;
    }
}

/* An output array: float16/32/64, rank ndim, rest as arg_array. */
static PyArrayObject *arg_float_out(PyObject *obj, const char *name, int ndim)
{
    if (PyArray_Check(obj) && pe_dtype_of((PyArrayObject *)obj) >= 0)
        return arg_array(obj, name, PyArray_TYPE((PyArrayObject *)obj), ndim, ARG_WRITE);
    if (!PyArray_Check(obj))
        return arg_array(obj, name, NPY_DOUBLE, ndim, ARG_WRITE);
    PyErr_Format(PyExc_TypeError, "%s must have dtype float16, float32 or float64, not %R", name,
                 (PyObject *)PyArray_DESCR((PyArrayObject *)obj));
    return NULL;
}

/* ---- sinusoid ---- */

static PyObject *py_sinusoid(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *pos_o, *freq_o, *out_o;
    int layout;
    if (!PyArg_ParseTuple(args, "OOOi:sinusoid", &pos_o, &freq_o, &out_o, &layout))
        return NULL;
    PyArrayObject *pos = arg_array(pos_o, "positions", NPY_DOUBLE, 1, ARG_CONTIGUOUS);
    PyArrayObject *freq = pos ? arg_array(freq_o, "freq", NPY_DOUBLE, 1, ARG_CONTIGUOUS) : NULL;
    PyArrayObject *out = freq ? arg_float_out(out_o, "out", 2) : NULL;
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

    const double *p = (const double *)PyArray_DATA(pos), *f = (const double *)PyArray_DATA(freq);
    char *o = PyArray_BYTES(out);
    npy_intp row_stride = PyArray_STRIDE(out, 0);
    int dtype = pe_dtype_of(out), nthreads = effective_threads();
    Py_BEGIN_ALLOW_THREADS pe_sinusoid(p, n, f, half, layout, dtype, o, row_stride, nthreads);
    Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

/* ---- rotary position embedding (rope.c) ---- */

/* x as the rope kernel reads it: float16/32/64, native, aligned, rank >= 1,
 * contiguous along its last axis; leading strides are free. */
static PyArrayObject *rope_data_arg(PyObject *obj, const char *name, int flags)
{
    if (PyArray_Check(obj) && pe_dtype_of((PyArrayObject *)obj) < 0) {
        PyErr_Format(PyExc_TypeError, "%s must have dtype float16, float32 or float64, not %R",
                     name, (PyObject *)PyArray_DESCR((PyArrayObject *)obj));
        return NULL;
    }
    if (PyArray_Check(obj) && PyArray_NDIM((PyArrayObject *)obj) < 1) {
        PyErr_Format(PyExc_ValueError, "%s must have at least one dimension", name);
        return NULL;
    }
    int type = PyArray_Check(obj) ? PyArray_TYPE((PyArrayObject *)obj) : NPY_FLOAT;
    int ndim = PyArray_Check(obj) ? PyArray_NDIM((PyArrayObject *)obj) : 1;
    return arg_array(obj, name, type, ndim, flags);
}

/* Whether a and b are the same elements (same start, shape and strides). */
static int same_view(PyArrayObject *a, PyArrayObject *b)
{
    if (PyArray_BYTES(a) != PyArray_BYTES(b) || PyArray_NDIM(a) != PyArray_NDIM(b))
        return 0;
    for (int d = 0; d < PyArray_NDIM(a); ++d)
        if (PyArray_DIM(a, d) != PyArray_DIM(b, d) ||
            (PyArray_DIM(a, d) > 1 && PyArray_STRIDE(a, d) != PyArray_STRIDE(b, d)))
            return 0;
    return 1;
}

static PyObject *py_rope_apply(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *x_o, *pos_o, *freq_o, *out_o;
    int layout, inverse;
    double scale;
    if (!PyArg_ParseTuple(args, "OOOOidp:rope_apply", &x_o, &pos_o, &freq_o, &out_o, &layout,
                          &scale, &inverse))
        return NULL;
    PyArrayObject *x = rope_data_arg(x_o, "x", 0);
    if (x == NULL)
        return NULL;
    int nd = PyArray_NDIM(x);
    if (nd - 1 > PE_ROPE_MAXDIM) {
        PyErr_Format(PyExc_ValueError, "x must have at most %d dimensions", PE_ROPE_MAXDIM + 1);
        return NULL;
    }
    PyArrayObject *out = arg_array(out_o, "out", PyArray_TYPE(x), nd, ARG_WRITE);
    if (out == NULL)
        return NULL;
    /* positions: one float64 per row of x, any strides (0 where broadcast) */
    if (!PyArray_Check(pos_o)) {
        PyErr_Format(PyExc_TypeError, "positions must be a numpy.ndarray, not %.200s",
                     Py_TYPE(pos_o)->tp_name);
        return NULL;
    }
    PyArrayObject *pos = (PyArrayObject *)pos_o;
    if (PyArray_TYPE(pos) != NPY_DOUBLE || !PyArray_ISNOTSWAPPED(pos) || !PyArray_ISALIGNED(pos)) {
        PyErr_SetString(PyExc_TypeError, "positions must be an aligned native float64 array");
        return NULL;
    }
    if (PyArray_NDIM(pos) != nd - 1 ||
        !PyArray_CompareLists(PyArray_DIMS(pos), PyArray_DIMS(x), nd - 1)) {
        PyErr_SetString(PyExc_ValueError, "positions must have the shape x.shape[:-1]");
        return NULL;
    }
    PyArrayObject *freq = arg_array(freq_o, "freq", NPY_DOUBLE, 1, ARG_CONTIGUOUS);
    if (freq == NULL)
        return NULL;
    npy_intp dim = PyArray_DIM(x, nd - 1), half = PyArray_DIM(freq, 0);
    if (!PyArray_CompareLists(PyArray_DIMS(out), PyArray_DIMS(x), nd)) {
        PyErr_SetString(PyExc_ValueError, "out must have the shape of x");
        return NULL;
    }
    if (half < 1 || 2 * half > dim) {
        PyErr_Format(PyExc_ValueError, "freq must have between 1 and %zd elements (x.shape[-1]/2)",
                     (Py_ssize_t)(dim / 2));
        return NULL;
    }
    if (layout != PE_ROPE_HALF && layout != PE_ROPE_INTERLEAVED) {
        PyErr_SetString(PyExc_ValueError, "layout must be 0 (half) or 1 (interleaved)");
        return NULL;
    }
    if (!isfinite(scale)) {
        PyErr_SetString(PyExc_ValueError, "scale must be finite");
        return NULL;
    }
    if (!same_view(out, x) && check_no_overlap(out, "out", x, "x") < 0)
        return NULL;
    if (check_no_overlap(out, "out", pos, "positions") < 0 ||
        check_no_overlap(out, "out", freq, "freq") < 0)
        return NULL;

    npy_intp lead = nd - 1;
    npy_intp pstrides[PE_ROPE_MAXDIM];
    for (int d = 0; d < lead; ++d)
        pstrides[d] = PyArray_DIM(pos, d) > 1 ? PyArray_STRIDE(pos, d) : 0;
    struct pe_rope_args a = {
        .ndim = (int)lead,
        .shape = PyArray_DIMS(x),
        .x = PyArray_BYTES(x),
        .x_strides = PyArray_STRIDES(x),
        .out = PyArray_BYTES(out),
        .out_strides = PyArray_STRIDES(out),
        .pos = PyArray_BYTES(pos),
        .pos_strides = pstrides,
        .dim = dim,
        .freq = (const double *)PyArray_DATA(freq),
        .half = half,
        .scale = scale,
        .inverse = inverse,
        .layout = layout,
        .dtype = pe_dtype_of(x),
    };
    int nthreads = effective_threads(), rc;
    Py_BEGIN_ALLOW_THREADS rc = pe_rope_apply(&a, nthreads);
    Py_END_ALLOW_THREADS if (rc == -1) return PyErr_NoMemory();
    if (rc != 0) {
        PyErr_SetString(PyExc_ValueError, "rope_apply: arguments out of range");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *py_rope_table(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *pos_o, *freq_o, *cos_o, *sin_o;
    int layout;
    double scale;
    if (!PyArg_ParseTuple(args, "OOOOid:rope_table", &pos_o, &freq_o, &cos_o, &sin_o, &layout,
                          &scale))
        return NULL;
    PyArrayObject *pos = arg_array(pos_o, "positions", NPY_DOUBLE, 1, ARG_CONTIGUOUS);
    PyArrayObject *freq = pos ? arg_array(freq_o, "freq", NPY_DOUBLE, 1, ARG_CONTIGUOUS) : NULL;
    PyArrayObject *cos = freq ? arg_float_out(cos_o, "cos", 2) : NULL;
    PyArrayObject *sin = cos ? arg_array(sin_o, "sin", PyArray_TYPE(cos), 2, ARG_WRITE) : NULL;
    if (sin == NULL)
        return NULL;
    if (layout != PE_ROPE_HALF && layout != PE_ROPE_INTERLEAVED) {
        PyErr_SetString(PyExc_ValueError, "layout must be 0 (half) or 1 (interleaved)");
        return NULL;
    }
    if (!isfinite(scale)) {
        PyErr_SetString(PyExc_ValueError, "scale must be finite");
        return NULL;
    }
    npy_intp n = PyArray_DIM(pos, 0), half = PyArray_DIM(freq, 0);
    if (PyArray_DIM(cos, 0) != n || PyArray_DIM(cos, 1) != 2 * half || PyArray_DIM(sin, 0) != n ||
        PyArray_DIM(sin, 1) != 2 * half) {
        PyErr_Format(PyExc_ValueError, "cos and sin must have shape (%zd, %zd)", (Py_ssize_t)n,
                     (Py_ssize_t)(2 * half));
        return NULL;
    }
    if (check_no_overlap(cos, "cos", sin, "sin") < 0 ||
        check_no_overlap(cos, "cos", pos, "positions") < 0 ||
        check_no_overlap(cos, "cos", freq, "freq") < 0 ||
        check_no_overlap(sin, "sin", pos, "positions") < 0 ||
        check_no_overlap(sin, "sin", freq, "freq") < 0)
        return NULL;
    int dtype = pe_dtype_of(cos), nthreads = effective_threads(), rc;
    Py_BEGIN_ALLOW_THREADS rc =
        pe_rope_table((const double *)PyArray_DATA(pos), n, (const double *)PyArray_DATA(freq),
                      half, scale, layout, dtype, PyArray_BYTES(cos), PyArray_STRIDE(cos, 0),
                      PyArray_BYTES(sin), PyArray_STRIDE(sin, 0), nthreads);
    Py_END_ALLOW_THREADS if (rc != 0) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* (end of rope glue) */

/* ---- attention biases (bias.c) ---- */

/* (end of bias glue) */

/* ---- module ---- */

static PyMethodDef methods[] = {
    {"sinusoid", py_sinusoid, METH_VARARGS,
     "sinusoid(positions, freq, out, layout): fill out[r] with the sinusoid of positions[r]."},
    /* rope entries */
    {"rope_apply", py_rope_apply, METH_VARARGS,
     "rope_apply(x, positions, freq, out, layout, scale, inverse): rotate the pairs of each row "
     "of x by positions * freq into out (which may be x)."},
    {"rope_table", py_rope_table, METH_VARARGS,
     "rope_table(positions, freq, cos, sin, layout, scale): fill cos[r], sin[r] for positions[r]."},

    /* bias entries */
    {"set_num_threads", py_set_num_threads, METH_O,
     "set_num_threads(n): threads for the kernels; 0 follows OpenMP."},
    {"get_num_threads", py_get_num_threads, METH_NOARGS,
     "get_num_threads(): threads the next kernel will use."},
    {"simd_path", py_simd_path, METH_NOARGS, "simd_path(): 'avx2' or 'scalar', the path in use."},
    {"simd_cpu", py_simd_cpu, METH_NOARGS, "simd_cpu(): the best path this CPU supports."},
    {"set_simd", py_set_simd, METH_O,
     "set_simd(name): 'auto', 'scalar' or 'avx2'; returns the path now in use."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_core", "posenc's C kernels on NumPy buffers.", -1, methods,
};

PyMODINIT_FUNC PyInit__core(void)
{
    import_array();
    if (select_simd(getenv("POSENC_SIMD")) < 0)
        pe_simd_level = pe_simd_cpu_best(); /* unknown value: the Python layer warns */
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL)
        return NULL;
#ifdef _OPENMP
    int has_openmp = 1;
#else
    int has_openmp = 0;
#endif
    if (PyModule_AddIntConstant(m, "openmp", has_openmp) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
