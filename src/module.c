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
/* posenc builds with -Wundef (a kernel file that forgets simd.h would
 * silently lose its AVX2 path); NumPy's headers are not written for it */
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef"
#endif
#include <numpy/arrayobject.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "pe.h"
#include "relative.h"
#include "simd.h"

/* The kernels of the SIMD path in use (simd.h).  Read and written only
 * with the GIL held: run_kernel hands it to the kernel before releasing the
 * GIL, so a call keeps the path it started on whatever set_simd does
 * meanwhile on another thread. */
static const struct pe_kernels *kernels = &pe_kernels_scalar;

static const char *const simd_names[] = {"scalar", "avx2"};

/* ---- threads ---- */

#include <limits.h>
#if defined(_OPENMP) && (defined(__unix__) || defined(__APPLE__))
#include <pthread.h>
#define PE_FORK_AWARE 1
#else
#define PE_FORK_AWARE 0
#endif

/* 0: follow OpenMP (OMP_NUM_THREADS, threadpoolctl); > 0: set by the user. */
static int threads_requested = 0;

/* libgomp's threads do not survive fork(): in the child, the thread that
 * forked still holds a pool of threads that no longer exist, and the next
 * parallel region it starts with more than one thread waits for them
 * forever.  A region of one thread never touches the pool, and a thread
 * started after the fork gets a pool of its own.  So team_started records
 * that a kernel may have started a team of threads on a caller's thread;
 * in a child forked after that (forked_child), the kernels run on one
 * thread, and if set_num_threads asks for more there, each call large
 * enough for threads runs its kernel on a thread started for it
 * (fresh_call).  Both flags are written with the GIL held or in the
 * child's only thread. */
#if PE_FORK_AWARE
static int team_started = 0;
static int forked_child = 0;
#else
enum { forked_child = 0 };
#endif

static int effective_threads(void)
{
#ifdef _OPENMP
    int n = threads_requested;
    if (n == 0)
        n = forked_child ? 1 : omp_get_max_threads();
    /* no more threads than CPUs this process may run on (its affinity) */
    int cpus = omp_get_num_procs();
    if (n > cpus)
        n = cpus;
    return n > 1 ? n : 1;
#else
    return 1;
#endif
}

/* A kernel behind a uniform signature: k the table of the path to run,
 * args points to its arguments. */
typedef int (*kernel_fn)(const struct pe_kernels *k, void *args, int nthreads);

#if PE_FORK_AWARE
static void after_fork_in_child(void)
{
    if (team_started || forked_child) {
        forked_child = 1;
        threads_requested = 0; /* such a child starts at one thread */
    }
}

struct fresh_call {
    kernel_fn fn;
    const struct pe_kernels *k;
    void *args;
    int nthreads, rc;
};

static void *fresh_call_main(void *p)
{
    struct fresh_call *c = p;
    c->rc = c->fn(c->k, c->args, c->nthreads);
    return NULL;
}
#endif

/* fn(k, args, nthreads) with the GIL released, on effective_threads()
 * threads, k the kernels of the path in use now; returns what fn returns.
 * `size` is the number of elements the kernel writes: below
 * PE_PARALLEL_MIN every kernel runs on one thread. */
static int run_kernel(kernel_fn fn, void *args, npy_intp size)
{
    const struct pe_kernels *k = kernels; /* once, with the GIL held */
    int nthreads = size < PE_PARALLEL_MIN ? 1 : effective_threads(), rc;
#if PE_FORK_AWARE
    if (forked_child && nthreads > 1) {
        struct fresh_call c = {fn, k, args, nthreads, 0};
        pthread_t t;
        PyThreadState *save = PyEval_SaveThread();
        if (pthread_create(&t, NULL, fresh_call_main, &c) == 0)
            pthread_join(t, NULL);
        else
            c.rc = fn(k, args, 1); /* no thread to be had: one thread here */
        PyEval_RestoreThread(save);
        return c.rc;
    }
    if (nthreads > 1)
        team_started = 1;
#endif
    PyThreadState *save = PyEval_SaveThread();
    rc = fn(k, args, nthreads);
    PyEval_RestoreThread(save);
    return rc;
}

static PyObject *py_set_num_threads(PyObject *self, PyObject *arg)
{
    (void)self;
    int overflow;
    long n = PyLong_AsLongAndOverflow(arg, &overflow);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (overflow < 0 || (overflow == 0 && n < 0)) {
        PyErr_SetString(PyExc_ValueError, "n must be >= 0 (0 follows OpenMP)");
        return NULL;
    }
    /* above the CPU count: kept, and clamped to it when a kernel runs */
    threads_requested = (overflow > 0 || n > INT_MAX) ? INT_MAX : (int)n;
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
    return PyUnicode_FromString(kernels->name);
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
    int best = pe_simd_cpu_best(), level;
    if (name == NULL || name[0] == '\0' || strcmp(name, "auto") == 0)
        level = best;
    else if (strcmp(name, "scalar") == 0)
        level = PE_SIMD_SCALAR;
    else if (strcmp(name, "avx2") == 0)
        level = best >= PE_SIMD_AVX2 ? PE_SIMD_AVX2 : PE_SIMD_SCALAR;
    else
        return -1;
    kernels = pe_kernels_for(level);
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
    return PyUnicode_FromString(kernels->name);
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

/* As pe_dtype_of, and PE_BF16 for uint16: NumPy has no bfloat16 type, so
 * the kernels that take bfloat16 are handed its bits, as uint16 views
 * (posenc/_dtypes.py). */
static int pe_dtype_bf16_of(PyArrayObject *a)
{
    return PyArray_TYPE(a) == NPY_UINT16 ? PE_BF16 : pe_dtype_of(a);
}

/* An output array: float16/32/64 (and with bf16 set, uint16 holding
 * bfloat16), rank ndim, rest as arg_array. */
static PyArrayObject *arg_float_out(PyObject *obj, const char *name, int ndim, int bf16)
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

static PyObject *py_sinusoid(PyObject *self, PyObject *args)
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
    if (run_kernel(sinusoid_kernel, &c, PyArray_SIZE(out)) < 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* ---- rotary position embedding (rope.c) ---- */

/* The options both rope entry points take (apply_rope also the layouts
 * that change as they rotate). */
static int check_rope_options(int layout, double scale, int relayout)
{
    if (layout != PE_ROPE_HALF && layout != PE_ROPE_INTERLEAVED &&
        !(relayout && layout == PE_ROPE_INTERLEAVED_TO_HALF)) {
        PyErr_SetString(PyExc_ValueError, relayout
                                              ? "layout must be 0 (half), 1 (interleaved) or 2 "
                                                "(interleaved_to_half)"
                                              : "layout must be 0 (half) or 1 (interleaved)");
        return -1;
    }
    if (!isfinite(scale)) {
        PyErr_SetString(PyExc_ValueError, "scale must be finite");
        return -1;
    }
    return 0;
}

/* x as the rope kernel reads it: float16/32/64 or bfloat16 bits (uint16),
 * native, aligned, rank >= 1, contiguous along its last axis; leading
 * strides are free. */
static PyArrayObject *rope_data_arg(PyObject *obj, const char *name, int flags)
{
    if (PyArray_Check(obj) && pe_dtype_bf16_of((PyArrayObject *)obj) < 0) {
        PyErr_Format(PyExc_TypeError,
                     "%s must have dtype float16, float32, float64 or uint16 (the bits of "
                     "bfloat16), not %R",
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

/* xPos's log zeta (None: no xPos), or a float64 vector of half finite
 * values; centre and rate finite. */
static int xpos_arg(PyObject *zeta_o, npy_intp half, double centre, double rate, struct pe_xpos *xp)
{
    xp->log_zeta = NULL, xp->centre = 0.0, xp->rate = 0.0;
    if (zeta_o == Py_None)
        return 0;
    PyArrayObject *z = arg_array(zeta_o, "log_zeta", NPY_DOUBLE, 1, ARG_CONTIGUOUS);
    if (z == NULL)
        return -1;
    if (PyArray_DIM(z, 0) != half) {
        PyErr_Format(PyExc_ValueError, "log_zeta must have %zd elements (one per pair)",
                     (Py_ssize_t)half);
        return -1;
    }
    if (!isfinite(centre) || !isfinite(rate)) {
        PyErr_SetString(PyExc_ValueError, "the xPos centre and rate must be finite");
        return -1;
    }
    xp->log_zeta = (const double *)PyArray_DATA(z), xp->centre = centre, xp->rate = rate;
    return 0;
}

static int rope_apply_kernel(const struct pe_kernels *k, void *args, int nthreads)
{
    return pe_rope_apply(k, args, nthreads);
}

/* The channel map of positions in channels (pos: a leading axis of them):
 * int32, one entry per pair, 1 to PE_ROPE_MAXCHAN channels; `plain`: no
 * xPos and full tables, which are all positions in channels are defined
 * for.  NULL with an error otherwise. */
static PyArrayObject *channel_arg(PyObject *chan_o, PyArrayObject *pos, npy_intp half, int plain)
{
    PyArrayObject *chan = arg_array(chan_o, "channel", NPY_INT32, 1, ARG_CONTIGUOUS);
    if (chan == NULL)
        return NULL;
    if (PyArray_DIM(chan, 0) != half || PyArray_DIM(pos, 0) < 1 ||
        PyArray_DIM(pos, 0) > PE_ROPE_MAXCHAN) {
        PyErr_Format(PyExc_ValueError,
                     "channel must have one entry per pair and positions 1 to %d channels",
                     PE_ROPE_MAXCHAN);
        return NULL;
    }
    if (!plain) {
        PyErr_SetString(PyExc_ValueError,
                        "channel: positions in channels take full tables without xPos only");
        return NULL;
    }
    return chan;
}

static PyObject *py_rope_apply(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *x_o, *pos_o, *freq_o, *out_o, *chan_o = Py_None;
    PyObject *zeta_o = Py_None;
    int layout, inverse;
    double scale, centre = 0.0, rate = 0.0;
    if (!PyArg_ParseTuple(args, "OOOOidp|OddO:rope_apply", &x_o, &pos_o, &freq_o, &out_o, &layout,
                          &scale, &inverse, &zeta_o, &centre, &rate, &chan_o))
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
    /* positions in channels: a leading axis of channels before x.shape[:-1] */
    int chans = chan_o != Py_None;
    if (PyArray_NDIM(pos) != nd - 1 + chans ||
        !PyArray_CompareLists(PyArray_DIMS(pos) + chans, PyArray_DIMS(x), nd - 1)) {
        PyErr_SetString(PyExc_ValueError,
                        chans ? "positions must have the shape (channels,) + x.shape[:-1]"
                              : "positions must have the shape x.shape[:-1]");
        return NULL;
    }
    PyArrayObject *freq = arg_array(freq_o, "freq", NPY_DOUBLE, 1, ARG_CONTIGUOUS);
    if (freq == NULL)
        return NULL;
    npy_intp dim = PyArray_DIM(x, nd - 1), half = PyArray_DIM(freq, 0);
    PyArrayObject *chan = NULL;
    if (chans && (chan = channel_arg(chan_o, pos, half, zeta_o == Py_None)) == NULL)
        return NULL;
    if (!PyArray_CompareLists(PyArray_DIMS(out), PyArray_DIMS(x), nd)) {
        PyErr_SetString(PyExc_ValueError, "out must have the shape of x");
        return NULL;
    }
    if (half < 1 || 2 * half > dim) {
        PyErr_Format(PyExc_ValueError, "freq must have between 1 and %zd elements (x.shape[-1]/2)",
                     (Py_ssize_t)(dim / 2));
        return NULL;
    }
    if (check_rope_options(layout, scale, 1) < 0)
        return NULL;
    struct pe_xpos xpos;
    if (xpos_arg(zeta_o, half, centre, rate, &xpos) < 0)
        return NULL;
    if (layout == PE_ROPE_INTERLEAVED_TO_HALF && same_view(out, x)) {
        PyErr_SetString(PyExc_ValueError,
                        "out must not be x for layout 2 (interleaved_to_half): a row is read in "
                        "one layout and written in the other");
        return NULL;
    }
    if (layout == PE_ROPE_INTERLEAVED_TO_HALF && inverse)
        layout = PE_ROPE_HALF_TO_INTERLEAVED; /* read in the half layout, written interleaved */
    if (!same_view(out, x) && check_no_overlap(out, "out", x, "x") < 0)
        return NULL;
    if (check_no_overlap(out, "out", pos, "positions") < 0 ||
        check_no_overlap(out, "out", freq, "freq") < 0 ||
        (chan != NULL && check_no_overlap(out, "out", chan, "channel") < 0))
        return NULL;

    npy_intp lead = nd - 1;
    npy_intp pstrides[PE_ROPE_MAXDIM];
    for (int d = 0; d < lead; ++d)
        pstrides[d] = PyArray_DIM(pos, d + chans) > 1 ? PyArray_STRIDE(pos, d + chans) : 0;
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
        .dtype = pe_dtype_bf16_of(x),
        .channel = chans ? (const int32_t *)PyArray_DATA(chan) : NULL,
        .nchan = chans ? (int)PyArray_DIM(pos, 0) : 0,
        .chan_stride = chans ? PyArray_STRIDE(pos, 0) : 0,
        .xpos = xpos,
    };
    int rc = run_kernel(rope_apply_kernel, &a, PyArray_SIZE(out));
    if (rc == -1)
        return PyErr_NoMemory();
    if (rc != 0) {
        PyErr_SetString(PyExc_ValueError, "rope_apply: arguments out of range");
        return NULL;
    }
    Py_RETURN_NONE;
}

struct rope_table_call {
    const double *pos, *freq;
    npy_intp n, half, cos_stride, sin_stride;
    double scale;
    int layout, dtype, full;
    char *cos, *sin;
    const int32_t *channel;
    int nchan;
    struct pe_xpos xpos;
};

static int rope_table_kernel(const struct pe_kernels *k, void *args, int nthreads)
{
    const struct rope_table_call *c = args;
    return pe_rope_table(k, c->pos, c->n, c->freq, c->half, c->scale, c->layout, c->dtype, c->cos,
                         c->cos_stride, c->sin, c->sin_stride, c->channel, c->nchan, &c->xpos,
                         c->full, nthreads);
}

static PyObject *py_rope_table(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *pos_o, *freq_o, *cos_o, *sin_o, *chan_o = Py_None;
    PyObject *zeta_o = Py_None;
    int layout, full = 1;
    double scale, centre = 0.0, rate = 0.0;
    if (!PyArg_ParseTuple(args, "OOOOid|OddpO:rope_table", &pos_o, &freq_o, &cos_o, &sin_o, &layout,
                          &scale, &zeta_o, &centre, &rate, &full, &chan_o))
        return NULL;
    /* positions in channels: (channels, n) */
    int chans = chan_o != Py_None;
    PyArrayObject *pos = arg_array(pos_o, "positions", NPY_DOUBLE, 1 + chans, ARG_CONTIGUOUS);
    PyArrayObject *freq = pos ? arg_array(freq_o, "freq", NPY_DOUBLE, 1, ARG_CONTIGUOUS) : NULL;
    PyArrayObject *cos = freq ? arg_float_out(cos_o, "cos", 2, 1) : NULL;
    PyArrayObject *sin = cos ? arg_array(sin_o, "sin", PyArray_TYPE(cos), 2, ARG_WRITE) : NULL;
    if (sin == NULL)
        return NULL;
    if (check_rope_options(layout, scale, 0) < 0)
        return NULL;
    npy_intp n = PyArray_DIM(pos, chans), half = PyArray_DIM(freq, 0),
             width = full ? 2 * half : half;
    PyArrayObject *chan = NULL;
    if (chans && (chan = channel_arg(chan_o, pos, half, zeta_o == Py_None && full)) == NULL)
        return NULL;
    if (PyArray_DIM(cos, 0) != n || PyArray_DIM(cos, 1) != width || PyArray_DIM(sin, 0) != n ||
        PyArray_DIM(sin, 1) != width) {
        PyErr_Format(PyExc_ValueError, "cos and sin must have shape (%zd, %zd)", (Py_ssize_t)n,
                     (Py_ssize_t)width);
        return NULL;
    }
    struct pe_xpos xpos;
    if (xpos_arg(zeta_o, half, centre, rate, &xpos) < 0)
        return NULL;
    if (check_no_overlap(cos, "cos", sin, "sin") < 0 ||
        check_no_overlap(cos, "cos", pos, "positions") < 0 ||
        check_no_overlap(cos, "cos", freq, "freq") < 0 ||
        check_no_overlap(sin, "sin", pos, "positions") < 0 ||
        check_no_overlap(sin, "sin", freq, "freq") < 0 ||
        (chan != NULL && (check_no_overlap(cos, "cos", chan, "channel") < 0 ||
                          check_no_overlap(sin, "sin", chan, "channel") < 0)))
        return NULL;
    struct rope_table_call c = {
        .pos = (const double *)PyArray_DATA(pos),
        .freq = (const double *)PyArray_DATA(freq),
        .n = n,
        .half = half,
        .cos_stride = PyArray_STRIDE(cos, 0),
        .sin_stride = PyArray_STRIDE(sin, 0),
        .scale = scale,
        .layout = layout,
        .dtype = pe_dtype_bf16_of(cos),
        .full = full,
        .cos = PyArray_BYTES(cos),
        .sin = PyArray_BYTES(sin),
        .channel = chans ? (const int32_t *)PyArray_DATA(chan) : NULL,
        .nchan = chans ? (int)PyArray_DIM(pos, 0) : 0,
        .xpos = xpos,
    };
    int rc = run_kernel(rope_table_kernel, &c, 2 * PyArray_SIZE(cos));
    if (rc == -1)
        return PyErr_NoMemory();
    if (rc != 0) {
        PyErr_SetString(PyExc_ValueError, "rope_table: channel out of range");
        return NULL;
    }
    Py_RETURN_NONE;
}

/* ---- attention biases (bias.c) ---- */

/* The typenum of bias_target for float16/32/64 or bfloat16 bits (-1:
 * float16/32/64 only). */
#define FLOAT_OR_BF16 (-2)

/* 4-D (batch, heads, q, k) target of a bias kernel: an ndarray of the given
 * type (-1: float16/32/64, FLOAT_OR_BF16), rest as arg_array, q and k >= 1,
 * and elements that do not overlap one another (the kernel writes each
 * once, from several threads).  Fills *d; returns the array or NULL with an
 * error. */
static PyArrayObject *bias_target(PyObject *obj, const char *name, int typenum,
                                  struct pe_bias_dst *d)
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

static PyObject *py_alibi(PyObject *self, PyObject *args)
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
    if (run_kernel(alibi_kernel, &c, PyArray_SIZE(dst)) < 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
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

static PyObject *py_t5_bias(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *table_o, *dst_o, *thresh_o;
    long long q_offset;
    int bidirectional, add, single = 0;
    if (!PyArg_ParseTuple(args, "OOpOLp|p:t5_bias", &table_o, &dst_o, &bidirectional, &thresh_o,
                          &q_offset, &add, &single))
        return NULL;
    if (!PyArray_Check(table_o) || pe_dtype_bf16_of((PyArrayObject *)table_o) < 0) {
        PyErr_SetString(PyExc_TypeError, "table must be a numpy.ndarray of float16, float32, "
                                         "float64 or uint16 (the bits of bfloat16)");
        return NULL;
    }
    struct pe_bias_dst d;
    PyArrayObject *table =
        arg_array(table_o, "table", PyArray_TYPE((PyArrayObject *)table_o), 2, ARG_CONTIGUOUS);
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
    if (run_kernel(t5_bias_kernel, &c, single ? 0 : PyArray_SIZE(dst)) < 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
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

static PyObject *py_t5_table_grad(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *grad_o, *out_o, *thresh_o;
    long long q_offset;
    int bidirectional;
    if (!PyArg_ParseTuple(args, "OOpOL:t5_table_grad", &grad_o, &out_o, &bidirectional, &thresh_o,
                          &q_offset))
        return NULL;
    if (!PyArray_Check(grad_o) || pe_dtype_bf16_of((PyArrayObject *)grad_o) < 0) {
        PyErr_SetString(PyExc_TypeError, "grad must be a numpy.ndarray of float16, float32, "
                                         "float64 or uint16 (the bits of bfloat16)");
        return NULL;
    }
    /* read only: any outer strides, elements that share bytes included */
    PyArrayObject *grad = arg_array(grad_o, "grad", PyArray_TYPE((PyArrayObject *)grad_o), 4, 0);
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
    if (run_kernel(t5_grad_kernel, &c, PyArray_SIZE(grad)) < 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
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

static PyObject *py_t5_buckets(PyObject *self, PyObject *args)
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
    if (PyArray_DIM(out, 0) != PyArray_DIM(rel, 0)) {
        PyErr_SetString(PyExc_ValueError, "out must have the length of relative_position");
        return NULL;
    }
    if (check_no_overlap(out, "out", rel, "relative_position") < 0)
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
    if (run_kernel(t5_buckets_kernel, &c, PyArray_SIZE(out)) < 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
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

static PyObject *py_relative_positions(PyObject *self, PyObject *args)
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
    if (run_kernel(relative_positions_kernel, &c, PyArray_SIZE(out)) < 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* ---- relative terms inside attention (relative.c) ---- */

/* 0 if the strides of the 4-D `a`'s outer three axes are whole elements
 * (the kernels step by elements), else -1 with a ValueError. */
static int whole_strides(PyArrayObject *a, const char *name)
{
    for (int ax = 0; ax < 3; ++ax)
        if (PyArray_STRIDE(a, ax) % PyArray_ITEMSIZE(a) != 0) {
            PyErr_Format(PyExc_ValueError, "%s must have strides of whole elements", name);
            return -1;
        }
    return 0;
}

/* The column of products each distance reads: a C-contiguous int64 vector
 * of q_len + k_len - 1 entries in [-1, width).  NULL with an error if not. */
static PyArrayObject *rel_map_arg(PyObject *obj, npy_intp n, npy_intp width)
{
    PyArrayObject *map = arg_array(obj, "map", NPY_INT64, 1, ARG_CONTIGUOUS);
    if (map == NULL)
        return NULL;
    if (PyArray_DIM(map, 0) != n) {
        PyErr_Format(PyExc_ValueError, "map must have q_len + k_len - 1 = %zd entries",
                     (Py_ssize_t)n);
        return NULL;
    }
    const int64_t *m = (const int64_t *)PyArray_DATA(map);
    int64_t lo = 0, hi = 0;
    for (npy_intp t = 0; t < n; ++t) {
        lo = m[t] < lo ? m[t] : lo;
        hi = m[t] > hi ? m[t] : hi;
    }
    if (lo < -1 || hi >= width) {
        PyErr_Format(PyExc_ValueError, "map entries must be in [-1, %zd)", (Py_ssize_t)width);
        return NULL;
    }
    return map;
}

struct rel_gather_call {
    struct pe_rel_src src;
    const int64_t *map;
    const struct pe_bias_dst *dst;
    void *scratch;
};

/* The gather's scratch memory, kept between calls (a term gathers a block
 * at a time) up to this size, for one call at a time: taken and given back
 * with the GIL held; a call that finds it taken has its own. */
#define GATHER_CACHE_MAX (1 << 20)
static void *gather_cache;
static size_t gather_cache_size;
static int gather_cache_taken;

static void *take_gather_cache(size_t size)
{
    if (gather_cache_taken || size > GATHER_CACHE_MAX)
        return NULL;
    if (gather_cache_size < size) {
        void *bigger = realloc(gather_cache, size);
        if (bigger == NULL)
            return NULL;
        gather_cache = bigger;
        gather_cache_size = size;
    }
    gather_cache_taken = 1;
    return gather_cache;
}

static int rel_gather_kernel(const struct pe_kernels *k, void *args, int nthreads)
{
    const struct rel_gather_call *c = args;
    return pe_rel_gather_add(k, &c->src, c->map, c->dst, nthreads, c->scratch);
}

static PyObject *py_rel_gather_add(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *src_o, *map_o, *dst_o;
    int by_key, single = 0;
    if (!PyArg_ParseTuple(args, "OOOp|p:rel_gather_add", &src_o, &map_o, &dst_o, &by_key, &single))
        return NULL;
    struct pe_bias_dst d;
    PyArrayObject *dst = bias_target(dst_o, "scores", FLOAT_OR_BF16, &d);
    if (dst == NULL)
        return NULL;
    PyArrayObject *src =
        arg_array(src_o, "products", d.dtype == PE_F64 ? NPY_DOUBLE : NPY_FLOAT, 4, 0);
    if (src == NULL)
        return NULL;
    npy_intp rows = by_key ? d.k_len : d.q_len, width = PyArray_DIM(src, 3);
    npy_intp sb = PyArray_DIM(src, 0);
    if ((sb != 1 && sb != d.batch) || PyArray_DIM(src, 1) != d.heads ||
        PyArray_DIM(src, 2) != rows || width < 1) {
        PyErr_Format(PyExc_ValueError, "products must have shape (1 or %zd, %zd, %zd, width >= 1)",
                     (Py_ssize_t)d.batch, (Py_ssize_t)d.heads, (Py_ssize_t)rows);
        return NULL;
    }
    if (whole_strides(src, "products") < 0)
        return NULL;
    PyArrayObject *map = rel_map_arg(map_o, d.q_len + d.k_len - 1, width);
    if (map == NULL || check_no_overlap(dst, "scores", src, "products") < 0 ||
        check_no_overlap(dst, "scores", map, "map") < 0)
        return NULL;
    struct rel_gather_call c = {
        .src = {PyArray_BYTES(src), sb, rows, width, PyArray_STRIDE(src, 0), PyArray_STRIDE(src, 1),
                PyArray_STRIDE(src, 2), by_key},
        .map = (const int64_t *)PyArray_DATA(map),
        .dst = &d,
        .scratch = take_gather_cache(pe_rel_gather_scratch(d.q_len + d.k_len - 1)),
    };
    int rc = run_kernel(rel_gather_kernel, &c, single ? 0 : PyArray_SIZE(dst));
    if (c.scratch != NULL)
        gather_cache_taken = 0;
    if (rc < 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

struct rel_dense_call {
    struct pe_rel_src src;
    const struct pe_bias_dst *dst;
    int store;
};

static int rel_dense_kernel(const struct pe_kernels *k, void *args, int nthreads)
{
    const struct rel_dense_call *c = args;
    pe_rel_dense_add(k, &c->src, c->dst, c->store, nthreads);
    return 0;
}

static PyObject *py_rel_dense_add(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *src_o, *dst_o;
    int store = 0;
    if (!PyArg_ParseTuple(args, "OO|p:rel_dense_add", &src_o, &dst_o, &store))
        return NULL;
    struct pe_bias_dst d;
    PyArrayObject *dst = bias_target(dst_o, "scores", FLOAT_OR_BF16, &d);
    if (dst == NULL)
        return NULL;
    PyArrayObject *src = arg_array(src_o, "term", d.dtype == PE_F64 ? NPY_DOUBLE : NPY_FLOAT, 4, 0);
    if (src == NULL)
        return NULL;
    npy_intp sb = PyArray_DIM(src, 0), rows = PyArray_DIM(src, 2);
    if ((sb != 1 && sb != d.batch) || PyArray_DIM(src, 1) != d.heads ||
        (rows != 1 && rows != d.q_len) || PyArray_DIM(src, 3) != d.k_len) {
        PyErr_Format(PyExc_ValueError, "term must have shape (1 or %zd, %zd, 1 or %zd, %zd)",
                     (Py_ssize_t)d.batch, (Py_ssize_t)d.heads, (Py_ssize_t)d.q_len,
                     (Py_ssize_t)d.k_len);
        return NULL;
    }
    if (check_no_overlap(dst, "scores", src, "term") < 0)
        return NULL;
    struct rel_dense_call c = {
        .src = {PyArray_BYTES(src), sb, rows, d.k_len, PyArray_STRIDE(src, 0),
                PyArray_STRIDE(src, 1), PyArray_STRIDE(src, 2), 0},
        .dst = &d,
        .store = store,
    };
    run_kernel(rel_dense_kernel, &c, PyArray_SIZE(dst));
    Py_RETURN_NONE;
}

struct rel_scatter_call {
    struct pe_rel_weights w;
    struct pe_rel_sums out;
    const int64_t *map;
};

static int rel_scatter_kernel(const struct pe_kernels *k, void *args, int nthreads)
{
    const struct rel_scatter_call *c = args;
    (void)k;
    return pe_rel_scatter_add(&c->w, c->map, &c->out, nthreads);
}

static PyObject *py_rel_scatter_add(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *w_o, *map_o, *out_o;
    int single = 0, by_key = 0;
    if (!PyArg_ParseTuple(args, "OOO|pp:rel_scatter_add", &w_o, &map_o, &out_o, &single, &by_key))
        return NULL;
    if (!PyArray_Check(w_o) || pe_dtype_of((PyArrayObject *)w_o) < 0) {
        PyErr_SetString(PyExc_TypeError, "weights must be a numpy.ndarray of float16, float32 or "
                                         "float64");
        return NULL;
    }
    PyArrayObject *w = arg_array(w_o, "weights", PyArray_TYPE((PyArrayObject *)w_o), 4, 0);
    PyArrayObject *out =
        w ? arg_array(out_o, "out", PyArray_TYPE(w) == NPY_DOUBLE ? NPY_DOUBLE : NPY_FLOAT, 4,
                      ARG_WRITE)
          : NULL;
    if (out == NULL)
        return NULL;
    npy_intp width = PyArray_DIM(out, 3), rows = PyArray_DIM(w, by_key ? 3 : 2);
    if (PyArray_DIM(out, 0) != PyArray_DIM(w, 0) || PyArray_DIM(out, 1) != PyArray_DIM(w, 1) ||
        PyArray_DIM(out, 2) != rows) {
        PyErr_Format(PyExc_ValueError, "out must have shape (%zd, %zd, %zd, width)",
                     (Py_ssize_t)PyArray_DIM(w, 0), (Py_ssize_t)PyArray_DIM(w, 1),
                     (Py_ssize_t)rows);
        return NULL;
    }
    if (width < 1) {
        PyErr_SetString(PyExc_ValueError, "out must have a last axis of at least one element");
        return NULL;
    }
    if (whole_strides(w, "weights") < 0 || whole_strides(out, "out") < 0)
        return NULL;
    /* rows, then planes of them, one after the other (gaps allowed): no
     * entry written twice by two threads */
    npy_intp row = PyArray_STRIDE(out, 2), head = PyArray_STRIDE(out, 1);
    if (row < width * PyArray_ITEMSIZE(out) || head < PyArray_DIM(out, 2) * row ||
        PyArray_STRIDE(out, 0) < PyArray_DIM(out, 1) * head) {
        PyErr_SetString(PyExc_ValueError, "out must be laid out as C-contiguous rows, with gaps "
                                          "between them at most");
        return NULL;
    }
    PyArrayObject *map = rel_map_arg(map_o, PyArray_DIM(w, 2) + PyArray_DIM(w, 3) - 1, width);
    if (map == NULL || check_no_overlap(out, "out", w, "weights") < 0 ||
        check_no_overlap(out, "out", map, "map") < 0)
        return NULL;
    struct rel_scatter_call c = {
        .w = {PyArray_BYTES(w), pe_dtype_of(w), PyArray_DIM(w, 0), PyArray_DIM(w, 1),
              PyArray_DIM(w, 2), PyArray_DIM(w, 3), PyArray_STRIDE(w, 0), PyArray_STRIDE(w, 1),
              PyArray_STRIDE(w, 2), by_key},
        .out = {PyArray_BYTES(out), PyArray_TYPE(out) == NPY_DOUBLE ? PE_F64 : PE_F32, width,
                PyArray_STRIDE(out, 0), PyArray_STRIDE(out, 1), PyArray_STRIDE(out, 2)},
        .map = (const int64_t *)PyArray_DATA(map),
    };
    if (run_kernel(rel_scatter_kernel, &c, single ? 0 : PyArray_SIZE(w)) < 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* ---- module ---- */

static PyMethodDef methods[] = {
    {"sinusoid", py_sinusoid, METH_VARARGS,
     "sinusoid(positions, freq, out, layout): fill out[r] with the sinusoid of positions[r]."},
    {"rope_apply", py_rope_apply, METH_VARARGS,
     "rope_apply(x, positions, freq, out, layout, scale, inverse[, log_zeta, centre, rate[, "
     "channel]]): rotate the pairs of each row of x by positions * freq into out (which may be "
     "x); with channel (int32, one per pair), positions has a leading axis of channels and pair i "
     "takes channel[i]'s."},
    {"rope_table", py_rope_table, METH_VARARGS,
     "rope_table(positions, freq, cos, sin, layout, scale[, log_zeta, centre, rate, full[, "
     "channel]]): fill cos[r], sin[r] for positions[r] (positions[channel[i], r] for pair i with "
     "channel)."},

    {"alibi", py_alibi, METH_VARARGS,
     "alibi(slopes, dst, q_offset, causal, add): ALiBi into the 4-D dst (written, or added)."},
    {"t5_bias", py_t5_bias, METH_VARARGS,
     "t5_bias(table, dst, bidirectional, thresholds, q_offset, add, single=False): T5's bias into "
     "dst; single: on one thread."},
    {"t5_table_grad", py_t5_table_grad, METH_VARARGS,
     "t5_table_grad(grad, out, bidirectional, thresholds, q_offset): out[b, h] = the sum of "
     "grad[:, h, i, j] over bucket(j - (q_offset + i)) == b (float64 for float64 grad, else "
     "float32)."},
    {"t5_buckets", py_t5_buckets, METH_VARARGS,
     "t5_buckets(rel, out, bidirectional, num_buckets, thresholds): T5's bucket of each rel."},
    {"relative_positions", py_relative_positions, METH_VARARGS,
     "relative_positions(out, max_distance, q_offset): clipped j - (q_offset + i), -1: no clip."},
    {"rel_gather_add", py_rel_gather_add, METH_VARARGS,
     "rel_gather_add(products, map, scores, by_key, single=False): scores[b, h, i, j] += "
     "products[b, h, i or j, map[q_len - 1 - i + j]] (-1: left as is); single: on one thread."},
    {"rel_dense_add", py_rel_dense_add, METH_VARARGS,
     "rel_dense_add(term, scores, store=False): scores[b, h, i, j] += term[b, h, i, j] (term "
     "float32, or float64 for float64 scores, of shape (1 or batch, heads, 1 or q_len, k_len)), "
     "each sum rounded once to the scores' dtype; store: scores = term, each value rounded "
     "once."},
    {"rel_scatter_add", py_rel_scatter_add, METH_VARARGS,
     "rel_scatter_add(weights, map, out, single=False, by_key=False): out[b, h, i (j by key), "
     "map[q_len - 1 - i + j]] += "
     "weights[b, h, i, j]; single: on one thread."},
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

/* m.name = {k1: v1, k2: v2}; 0, or -1 with an error. */
static int add_codes(PyObject *m, const char *name, const char *k1, int v1, const char *k2, int v2)
{
    PyObject *d = Py_BuildValue("{s:i,s:i}", k1, v1, k2, v2);
    if (d == NULL)
        return -1;
    if (PyModule_AddObject(m, name, d) < 0) {
        Py_DECREF(d);
        return -1;
    }
    return 0;
}

PyMODINIT_FUNC PyInit__core(void)
{
    import_array();
    if (select_simd(getenv("POSENC_SIMD")) < 0)
        select_simd("auto"); /* unknown value: the Python layer warns */
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL)
        return NULL;
#ifdef _OPENMP
    int has_openmp = 1;
#else
    int has_openmp = 0;
#endif
    /* the limits and codes the Python layer checks and passes, written once */
    if (PyModule_AddIntConstant(m, "openmp", has_openmp) < 0 ||
        PyModule_AddObject(m, "MAX_Q_OFFSET", PyLong_FromLongLong(PE_MAX_Q_OFFSET)) < 0 ||
        PyModule_AddIntConstant(m, "T5_MAX_BUCKETS", PE_T5_MAX_BUCKETS) < 0 ||
        PyModule_AddIntConstant(m, "ROPE_MAX_CHANNELS", PE_ROPE_MAXCHAN) < 0 ||
        PyModule_AddObject(m, "T5_MAX_DISTANCE", PyLong_FromLongLong(PE_T5_MAX_DISTANCE)) < 0 ||
        add_codes(m, "SINUSOID_LAYOUTS", "interleaved", PE_INTERLEAVED, "concat", PE_CONCAT) < 0 ||
        add_codes(m, "ROPE_LAYOUTS", "half", PE_ROPE_HALF, "interleaved", PE_ROPE_INTERLEAVED) <
            0 ||
        PyModule_AddIntConstant(m, "ROPE_INTERLEAVED_TO_HALF", PE_ROPE_INTERLEAVED_TO_HALF) < 0) {
        Py_DECREF(m);
        return NULL;
    }
#if PE_FORK_AWARE
    /* without the handler (out of memory) a forked child may hang as before */
    (void)pthread_atfork(NULL, NULL, after_fork_in_child);
#endif
    return m;
}
