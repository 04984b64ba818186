/*
 * module.h -- what the files of posenc._core share (module.c, the method
 * table and the module's init; module_run.c, threads, SIMD path and
 * run_kernel; module_args.c, the argument checks; module_<family>.c, each
 * family's methods): NumPy's C API, one copy of it for the whole module
 * (import_array() in module.c fills it), the checks every method uses and
 * the methods themselves.  Only these files include Python.h.
 */
#ifndef PE_MODULE_H
#define PE_MODULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
/* one table of NumPy's C API for all the files, filled in module.c */
#define PY_ARRAY_UNIQUE_SYMBOL posenc_ARRAY_API
#ifndef PE_MODULE_INIT
#define NO_IMPORT_ARRAY
#endif
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

#include "pe.h"
#include "simd.h"

/* ---- running a kernel (module_run.c) ---- */

/* A kernel behind a uniform signature: k the table of the path to run,
 * args points to its arguments. */
typedef int (*kernel_fn)(const struct pe_kernels *k, void *args, int nthreads);

/* fn(k, args, nthreads) with the GIL released, on the threads the user
 * asked for, k the kernels of the path in use now; returns what fn
 * returns.  `size` is the number of elements the kernel writes: below
 * PE_PARALLEL_MIN every kernel runs on one thread. */
int run_kernel(kernel_fn fn, void *args, npy_intp size);

/* What a method returns after run_kernel returned rc: None for 0, a
 * MemoryError for -1, else a ValueError with the message out_of_range. */
PyObject *kernel_result(int rc, const char *out_of_range);

/* Select "scalar", "avx2" (if the CPU has it) or "auto"; 0, or -1 for
 * another name. */
int select_simd(const char *name);

/* What to do in a child forked after a team of threads ran (at init). */
void module_threads_init(void);

/* ---- argument checks (module_args.c) ---- */

enum { ARG_WRITE = 1, ARG_CONTIGUOUS = 2 };

/* `obj` as an ndarray of the given type and rank, aligned, native byte
 * order, with a contiguous last axis (fully contiguous with ARG_CONTIGUOUS),
 * writeable with ARG_WRITE.  Returns a borrowed pointer or NULL with a
 * TypeError/ValueError naming the argument. */
PyArrayObject *arg_array(PyObject *obj, const char *name, int typenum, int ndim, int flags);

/* The kernel's element type (enum pe_dtype) for a NumPy float type, or -1. */
int pe_dtype_of(PyArrayObject *a);

/* As pe_dtype_of, and PE_BF16 for uint16: NumPy has no bfloat16 type, so
 * the kernels that take bfloat16 are handed its bits, as uint16 views
 * (posenc/_dtypes.py). */
int pe_dtype_bf16_of(PyArrayObject *a);

/* An array of float16/32/64 (and with bf16 set, uint16 holding bfloat16),
 * of any of them: a TypeError naming it otherwise, else as arg_array with
 * its own type. */
PyArrayObject *arg_float_array(PyObject *obj, const char *name, int ndim, int flags, int bf16);

/* An output array: float16/32/64 (and with bf16 set, uint16 holding
 * bfloat16), rank ndim, rest as arg_array. */
PyArrayObject *arg_float_out(PyObject *obj, const char *name, int ndim, int bf16);

/* Fails with a ValueError if `out` shares bytes with `in`. */
int check_no_overlap(PyArrayObject *out, const char *out_name, PyArrayObject *in,
                     const char *in_name);

/* A 1-D out with one element per element of the 1-D `in` and no byte of
 * it: 0, or -1 with a ValueError naming them. */
int check_out_vector(PyArrayObject *out, PyArrayObject *in, const char *in_name);

/* The typenum of bias_target for float16/32/64 or bfloat16 bits (-1:
 * float16/32/64 only). */
#define FLOAT_OR_BF16 (-2)

/* 4-D (batch, heads, q, k) target of a bias or relative kernel: an ndarray
 * of the given type (-1: float16/32/64, FLOAT_OR_BF16), rest as arg_array,
 * q and k >= 1, and elements that do not overlap one another (the kernel
 * writes each once, from several threads).  Fills *d; returns the array or
 * NULL with an error. */
PyArrayObject *bias_target(PyObject *obj, const char *name, int typenum, struct pe_bias_dst *d);

/* ---- the methods (module_<family>.c, module_run.c) ---- */

PyObject *py_sinusoid(PyObject *self, PyObject *args);
PyObject *py_rope_apply(PyObject *self, PyObject *args);
PyObject *py_rope_table(PyObject *self, PyObject *args);
PyObject *py_alibi(PyObject *self, PyObject *args);
PyObject *py_t5_bias(PyObject *self, PyObject *args);
PyObject *py_bias_given(PyObject *self, PyObject *args);
PyObject *py_fire_rows(PyObject *self, PyObject *args);
PyObject *py_t5_table_grad(PyObject *self, PyObject *args);
PyObject *py_t5_buckets(PyObject *self, PyObject *args);
PyObject *py_relative_positions(PyObject *self, PyObject *args);
PyObject *py_rel_gather_add(PyObject *self, PyObject *args);
PyObject *py_rel_dense_add(PyObject *self, PyObject *args);
PyObject *py_rel_scatter_add(PyObject *self, PyObject *args);
PyObject *py_cast(PyObject *self, PyObject *args);
PyObject *py_bf16_products(PyObject *self, PyObject *args);
PyObject *py_cope(PyObject *self, PyObject *args);
PyObject *py_cope_gates(PyObject *self, PyObject *args);
PyObject *py_cope_grad(PyObject *self, PyObject *args);
PyObject *py_cope_products(PyObject *self, PyObject *args);
PyObject *py_complex_order(PyObject *self, PyObject *args);
PyObject *py_set_num_threads(PyObject *self, PyObject *arg);
PyObject *py_get_num_threads(PyObject *self, PyObject *unused);
PyObject *py_simd_path(PyObject *self, PyObject *unused);
PyObject *py_simd_cpu(PyObject *self, PyObject *unused);
PyObject *py_simd_paths(PyObject *self, PyObject *unused);
PyObject *py_simd_bf16(PyObject *self, PyObject *unused);
PyObject *py_set_simd_bf16(PyObject *self, PyObject *arg);
PyObject *py_set_simd(PyObject *self, PyObject *arg);

#endif
