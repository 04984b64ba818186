/*
 * module_relative.c -- posenc._core's relative terms inside attention:
 * rel_gather_add, rel_dense_add, rel_scatter_add and cast, their arguments
 * checked, then the entry points of relative.c.
 */
#include "module.h"

#include <stdlib.h>

#include "dot.h"
#include "relative.h"

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
    struct pe_rel_src src, first;
    int both;
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
    return pe_rel_gather_add(k, &c->src, c->both ? &c->first : NULL, c->map, c->dst, nthreads,
                             c->scratch);
}

/* A 4-D array of products (float64 for float64 scores, else float32) of
 * shape (1 or batch, heads, rows, width), width > 0 (or the given width,
 * if > 0), as the gather of d reads it: NULL with an error if not. */
static PyArrayObject *gather_products(PyObject *obj, const char *name, const struct pe_bias_dst *d,
                                      npy_intp rows, npy_intp width)
{
    PyArrayObject *src = arg_array(obj, name, d->dtype == PE_F64 ? NPY_DOUBLE : NPY_FLOAT, 4, 0);
    if (src == NULL)
        return NULL;
    npy_intp sb = PyArray_DIM(src, 0), w = PyArray_DIM(src, 3);
    if ((sb != 1 && sb != d->batch) || PyArray_DIM(src, 1) != d->heads ||
        PyArray_DIM(src, 2) != rows || w < 1 || (width > 0 && w != width)) {
        if (width > 0)
            PyErr_Format(PyExc_ValueError, "%s must have shape (1 or %zd, %zd, %zd, %zd)", name,
                         (Py_ssize_t)d->batch, (Py_ssize_t)d->heads, (Py_ssize_t)rows,
                         (Py_ssize_t)width);
        else
            PyErr_Format(PyExc_ValueError, "%s must have shape (1 or %zd, %zd, %zd, width >= 1)",
                         name, (Py_ssize_t)d->batch, (Py_ssize_t)d->heads, (Py_ssize_t)rows);
        return NULL;
    }
    return whole_strides(src, name) < 0 ? NULL : src;
}

/* The struct pe_rel_src of the products src. */
static struct pe_rel_src gather_src(PyArrayObject *src, int by_key)
{
    struct pe_rel_src s = {
        PyArray_BYTES(src),     PyArray_DIM(src, 0),    PyArray_DIM(src, 2),    PyArray_DIM(src, 3),
        PyArray_STRIDE(src, 0), PyArray_STRIDE(src, 1), PyArray_STRIDE(src, 2), by_key};
    return s;
}

PyObject *py_rel_gather_add(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *src_o, *map_o, *dst_o, *key_o = Py_None;
    int by_key, single = 0;
    if (!PyArg_ParseTuple(args, "OOOp|pO:rel_gather_add", &src_o, &map_o, &dst_o, &by_key, &single,
                          &key_o))
        return NULL;
    struct pe_bias_dst d;
    PyArrayObject *dst = bias_target(dst_o, "scores", FLOAT_OR_BF16, &d);
    if (dst == NULL)
        return NULL;
    PyArrayObject *src = gather_products(src_o, "products", &d, by_key ? d.k_len : d.q_len, 0);
    if (src == NULL)
        return NULL;
    npy_intp width = PyArray_DIM(src, 3);
    /* key_products: by key, after products (by query) */
    PyArrayObject *keys = NULL;
    if (key_o != Py_None) {
        if (by_key) {
            PyErr_SetString(PyExc_ValueError, "key_products go with products by query");
            return NULL;
        }
        keys = gather_products(key_o, "key_products", &d, d.k_len, width);
        if (keys == NULL || check_no_overlap(dst, "scores", keys, "key_products") < 0)
            return NULL;
    }
    PyArrayObject *map = rel_map_arg(map_o, d.q_len + d.k_len - 1, width);
    if (map == NULL || check_no_overlap(dst, "scores", src, "products") < 0 ||
        check_no_overlap(dst, "scores", map, "map") < 0)
        return NULL;
    struct rel_gather_call c = {
        .src = gather_src(keys != NULL ? keys : src, keys != NULL || by_key),
        .first = gather_src(src, 0),
        .both = keys != NULL,
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

PyObject *py_rel_dense_add(PyObject *self, PyObject *args)
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
    return kernel_result(run_kernel(rel_dense_kernel, &c, PyArray_SIZE(dst)), NULL);
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

PyObject *py_rel_scatter_add(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *w_o, *map_o, *out_o;
    int single = 0, by_key = 0;
    if (!PyArg_ParseTuple(args, "OOO|pp:rel_scatter_add", &w_o, &map_o, &out_o, &single, &by_key))
        return NULL;
    PyArrayObject *w = arg_float_array(w_o, "weights", 4, 0, 0);
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
    return kernel_result(run_kernel(rel_scatter_kernel, &c, single ? 0 : PyArray_SIZE(w)), NULL);
}

struct cast_call {
    const char *x;
    char *out;
    npy_intp n;
    int dtype;
};

static int cast_kernel(const struct pe_kernels *k, void *args, int nthreads)
{
    const struct cast_call *c = args;
    pe_cast(k, c->x, c->out, c->n, c->dtype, nthreads);
    return 0;
}

PyObject *py_cast(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *x_o, *out_o;
    if (!PyArg_ParseTuple(args, "OO:cast", &x_o, &out_o))
        return NULL;
    PyArrayObject *out = arg_float_out(out_o, "out", 1, 1);
    if (out == NULL)
        return NULL;
    int dtype = pe_dtype_bf16_of(out);
    PyArrayObject *x =
        arg_array(x_o, "x", dtype == PE_F64 ? NPY_DOUBLE : NPY_FLOAT, 1, ARG_CONTIGUOUS);
    if (x == NULL)
        return NULL;
    if (check_out_vector(out, x, "x") < 0)
        return NULL;
    struct cast_call c = {PyArray_BYTES(x), PyArray_BYTES(out), PyArray_DIM(x, 0), dtype};
    return kernel_result(run_kernel(cast_kernel, &c, PyArray_SIZE(out)), NULL);
}

struct bf16_products_call {
    struct pe_bf16_gemm g;
    struct pe_bf16_map map;
};

static int bf16_products_kernel(const struct pe_kernels *k, void *args, int nthreads)
{
    const struct bf16_products_call *c = args;
    return pe_bf16_products(k, &c->g, c->map.map != NULL ? &c->map : NULL, nthreads);
}

/* The element stride of axis ax of a (whole elements, checked). */
static int element_stride(PyArrayObject *a, int ax, const char *name, ptrdiff_t *stride)
{
    npy_intp s = PyArray_STRIDE(a, ax), size = PyArray_ITEMSIZE(a);
    if (s % size != 0) {
        PyErr_Format(PyExc_ValueError, "%s must have strides of whole elements", name);
        return -1;
    }
    *stride = s / size;
    return 0;
}

PyObject *py_bf16_products(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *a_o, *b_o, *out_o, *init_o = Py_None, *map_o = Py_None;
    int by_key = 0;
    if (!PyArg_ParseTuple(args, "OOO|OOp:bf16_products", &a_o, &b_o, &out_o, &init_o, &map_o,
                          &by_key))
        return NULL;
    PyArrayObject *a = arg_array(a_o, "a", NPY_UINT16, 3, 0);
    PyArrayObject *b = a ? arg_array(b_o, "b", NPY_UINT16, 3, 0) : NULL;
    PyArrayObject *out = b ? arg_array(out_o, "out", NPY_FLOAT, 3, ARG_WRITE) : NULL;
    if (out == NULL)
        return NULL;
    npy_intp heads = PyArray_DIM(a, 0), m = PyArray_DIM(a, 1), d = PyArray_DIM(a, 2);
    npy_intp n = PyArray_DIM(b, 1);
    if (d % 2 != 0) {
        PyErr_SetString(PyExc_ValueError, "a and b must have an even last axis");
        return NULL;
    }
    if (PyArray_DIM(b, 0) != heads || PyArray_DIM(b, 2) != d) {
        PyErr_Format(PyExc_ValueError, "b must have shape (%zd, n, %zd)", (Py_ssize_t)heads,
                     (Py_ssize_t)d);
        return NULL;
    }
    if (PyArray_DIM(out, 0) != heads || PyArray_DIM(out, 1) != m || PyArray_DIM(out, 2) != n) {
        PyErr_Format(PyExc_ValueError, "out must have shape (%zd, %zd, %zd)", (Py_ssize_t)heads,
                     (Py_ssize_t)m, (Py_ssize_t)n);
        return NULL;
    }
    struct bf16_products_call c = {{.heads = heads, .m_len = m, .n_len = n, .d = d}};
    c.g.a = (const uint16_t *)PyArray_DATA(a);
    c.g.b = (const uint16_t *)PyArray_DATA(b);
    c.g.c = (float *)PyArray_DATA(out);
    if (element_stride(a, 0, "a", &c.g.a_head) < 0 || element_stride(a, 1, "a", &c.g.a_row) < 0 ||
        element_stride(b, 0, "b", &c.g.b_head) < 0 || element_stride(b, 1, "b", &c.g.b_row) < 0 ||
        element_stride(out, 0, "out", &c.g.c_head) < 0 ||
        element_stride(out, 1, "out", &c.g.c_row) < 0)
        return NULL;
    /* every product written once: rows, then heads, one after the other */
    if ((m > 1 && c.g.c_row < n) || (heads > 1 && c.g.c_head < m * c.g.c_row) || c.g.c_row < 0 ||
        c.g.c_head < 0) {
        PyErr_SetString(PyExc_ValueError, "out must be laid out as C-contiguous rows, with gaps "
                                          "between them at most");
        return NULL;
    }
    if (check_no_overlap(out, "out", a, "a") < 0 || check_no_overlap(out, "out", b, "b") < 0)
        return NULL;
    if (init_o != Py_None) {
        PyArrayObject *init = arg_array(init_o, "init", NPY_FLOAT, 2, 0);
        if (init == NULL)
            return NULL;
        if (PyArray_DIM(init, 0) != heads || PyArray_DIM(init, 1) != n) {
            PyErr_Format(PyExc_ValueError, "init must have shape (%zd, %zd)", (Py_ssize_t)heads,
                         (Py_ssize_t)n);
            return NULL;
        }
        if (element_stride(init, 0, "init", &c.g.init_head) < 0 ||
            check_no_overlap(out, "out", init, "init") < 0)
            return NULL;
        c.g.init = (const float *)PyArray_DATA(init);
    }
    if (map_o != Py_None) {
        /* the map of a gather whose rows are these products' (m of them)
         * and whose other side has `other` >= 1 elements */
        npy_intp entries = PyArray_Check(map_o) && PyArray_NDIM((PyArrayObject *)map_o) == 1
                               ? PyArray_DIM((PyArrayObject *)map_o, 0)
                               : 0;
        if (entries < m) {
            PyErr_Format(PyExc_ValueError,
                         "map must be a 1-dimensional int64 array of m + "
                         "other - 1 >= m = %zd entries",
                         (Py_ssize_t)m);
            return NULL;
        }
        PyArrayObject *map = rel_map_arg(map_o, entries, n);
        if (map == NULL || check_no_overlap(out, "out", map, "map") < 0)
            return NULL;
        c.map.map = (const int64_t *)PyArray_DATA(map);
        c.map.other = entries - m + 1;
        c.map.by_key = by_key;
    }
    return kernel_result(run_kernel(bf16_products_kernel, &c, PyArray_SIZE(out) * (d / 2 + 1)),
                         NULL);
}
