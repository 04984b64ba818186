/*
 * module_run.c -- how posenc._core runs a kernel: the threads (OpenMP,
 * clamped to the CPU affinity, one thread in a child forked after a team
 * ran), the SIMD path in use, and run_kernel, which releases the GIL around
 * the kernel.
 */
#include "module.h"

#include <limits.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* The kernels of the SIMD path in use (simd.h).  Read and written only
 * with the GIL held: run_kernel hands it to the kernel before releasing the
 * GIL, so a call keeps the path it started on whatever set_simd does
 * meanwhile on another thread. */
static const struct pe_kernels *kernels = &pe_kernels_scalar;

/* The paths' names, indexed by enum pe_simd. */
static const char *const simd_names[PE_SIMD_NPATHS] = {"scalar", "avx2", "neon", "avx512"};

/* ---- threads ---- */

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
int run_kernel(kernel_fn fn, void *args, npy_intp size)
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

PyObject *py_set_num_threads(PyObject *self, PyObject *arg)
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

PyObject *py_get_num_threads(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    return PyLong_FromLong(effective_threads());
}

/* ---- SIMD ---- */

PyObject *py_simd_path(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    return PyUnicode_FromString(kernels->name);
}

PyObject *py_simd_cpu(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    return PyUnicode_FromString(simd_names[pe_simd_cpu_best()]);
}

PyObject *py_simd_paths(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    /* in the order of enum pe_simd: the portable path first */
    PyObject *list = PyList_New(0), *t = NULL;
    if (list == NULL)
        return NULL;
    for (int level = 0; level < PE_SIMD_NPATHS; ++level) {
        if (!pe_simd_cpu_has(level))
            continue;
        PyObject *name = PyUnicode_FromString(simd_names[level]);
        int rc = name == NULL ? -1 : PyList_Append(list, name);
        Py_XDECREF(name);
        if (rc < 0)
            goto done;
    }
    t = PyList_AsTuple(list);
done:
    Py_DECREF(list);
    return t;
}

PyObject *py_simd_bf16(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
    return PyBool_FromLong(pe_simd_cpu_bf16());
}

/* 0: the AVX-512 path leaves out AVX-512 BF16 even where the CPU has it
 * (for the tests, which compare both of its tables with the portable
 * path); read and written with the GIL held. */
static int bf16_allowed = 1;

static const struct pe_kernels *kernels_of(int level)
{
#if PE_X86
    if (level == PE_SIMD_AVX512 && !bf16_allowed)
        return &pe_kernels_avx512;
#endif
    return pe_kernels_for(level);
}

PyObject *py_set_simd_bf16(PyObject *self, PyObject *arg)
{
    (void)self;
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
    int before = bf16_allowed;
    bf16_allowed = on;
#if PE_X86
    if (kernels == &pe_kernels_avx512 || kernels == &pe_kernels_avx512_bf16)
        kernels = kernels_of(PE_SIMD_AVX512);
#endif
    return PyBool_FromLong(before);
}

/* Select "scalar", "avx2", "avx512" or "neon" (if the CPU has it) or
 * "auto"; returns the path now in use.  A path the CPU lacks is the
 * portable one.  The environment variable POSENC_SIMD goes through here at
 * import; tests call it to run every path in one process. */
int select_simd(const char *name)
{
    int level = -1;
    if (name == NULL || name[0] == '\0' || strcmp(name, "auto") == 0) {
        level = pe_simd_cpu_best();
    } else {
        for (int l = 0; l < PE_SIMD_NPATHS; ++l)
            if (strcmp(name, simd_names[l]) == 0)
                level = pe_simd_cpu_has(l) ? l : PE_SIMD_SCALAR;
        if (level < 0)
            return -1;
    }
    kernels = kernels_of(level);
    return 0;
}

PyObject *py_set_simd(PyObject *self, PyObject *arg)
{
    (void)self;
    const char *name = PyUnicode_AsUTF8(arg);
    if (name == NULL)
        return NULL;
    if (select_simd(name) < 0) {
        PyErr_Format(PyExc_ValueError,
                     "simd must be 'auto', 'scalar', 'avx2', 'avx512' or 'neon', not '%s'", name);
        return NULL;
    }
    return PyUnicode_FromString(kernels->name);
}

void module_threads_init(void)
{
#if PE_FORK_AWARE
    /* without the handler (out of memory) a forked child may hang as before */
    (void)pthread_atfork(NULL, NULL, after_fork_in_child);
#endif
}

PyObject *kernel_result(int rc, const char *out_of_range)
{
    if (rc == -1)
        return PyErr_NoMemory();
    if (rc != 0) {
        PyErr_SetString(PyExc_ValueError, out_of_range != NULL ? out_of_range : "out of range");
        return NULL;
    }
    Py_RETURN_NONE;
}
