/*
 * module_rope.c -- posenc._core.rope_apply and rope_table: their arguments
 * checked (layouts, xPos, positions in channels), then pe_rope_apply and
 * pe_rope_table (rope.c, rope_table.c).
 */
#include "module.h"

#include <math.h>

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

PyObject *py_rope_apply(PyObject *self, PyObject *args)
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
    return kernel_result(run_kernel(rope_apply_kernel, &a, PyArray_SIZE(out)),
                         "rope_apply: arguments out of range");
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

PyObject *py_rope_table(PyObject *self, PyObject *args)
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
    return kernel_result(run_kernel(rope_table_kernel, &c, 2 * PyArray_SIZE(cos)),
                         "rope_table: channel out of range");
}
