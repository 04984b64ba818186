/*
 * module.c -- posenc._core: its method table and its init.
 *
 * Each method checks every object it is handed (module_args.c) before any
 * kernel runs, then releases the GIL and calls a kernel on plain pointers
 * (run_kernel, module_run.c); the methods of a family are in its
 * module_<family>.c.  The Python layer does the user-facing conversions
 * (any array-like, any layout) and hands over arrays in the form checked
 * there.
 */
#define PE_MODULE_INIT /* this file fills NumPy's table of its C API */
#include "module.h"

#include <stdlib.h>

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
    {"bias_given", py_bias_given, METH_VARARGS,
     "bias_given(values, dst, add): the bias whose element (i, j) of head h is "
     "values[h, q_len - 1 - i + j] (float64, rounded once) into the 4-D dst (written, or "
     "added)."},
    {"fire_rows", py_fire_rows, METH_VARARGS,
     "fire_rows(norm, psi, w1, b1, w2, b2, dst, q_offset, causal, add): FIRE's rows into the 4-D "
     "dst (written, or added): element (i, j) of head h is w2[h] . max(x w1 + b1, 0) + b2[h], x = "
     "psi[q_len - 1 - i + j] / norm[i], formed in float64 and rounded once; -inf for j > q_offset "
     "+ i when causal."},
    {"t5_table_grad", py_t5_table_grad, METH_VARARGS,
     "t5_table_grad(grad, out, bidirectional, thresholds, q_offset): out[b, h] = the sum of "
     "grad[:, h, i, j] over bucket(j - (q_offset + i)) == b (float64 for float64 grad, else "
     "float32)."},
    {"t5_buckets", py_t5_buckets, METH_VARARGS,
     "t5_buckets(rel, out, bidirectional, num_buckets, thresholds): T5's bucket of each rel."},
    {"relative_positions", py_relative_positions, METH_VARARGS,
     "relative_positions(out, max_distance, q_offset): clipped j - (q_offset + i), -1: no clip."},
    {"rel_gather_add", py_rel_gather_add, METH_VARARGS,
     "rel_gather_add(products, map, scores, by_key, single=False, key_products=None): "
     "scores[b, h, i, j] += products[b, h, i or j, map[q_len - 1 - i + j]] (-1: left as is); "
     "single: on one thread; key_products (by_key False): then += key_products[b, h, j, "
     "map[...]], in the same pass."},
    {"rel_dense_add", py_rel_dense_add, METH_VARARGS,
     "rel_dense_add(term, scores, store=False): scores[b, h, i, j] += term[b, h, i, j] (term "
     "float32, or float64 for float64 scores, of shape (1 or batch, heads, 1 or q_len, k_len)), "
     "each sum rounded once to the scores' dtype; store: scores = term, each value rounded "
     "once."},
    {"cast", py_cast, METH_VARARGS,
     "cast(x, out): out[j] = x[j] rounded once to out's dtype (x 1-D float32, or float64 for a "
     "float64 out; out float16, float32, float64 or uint16, the bits of bfloat16)."},
    {"bf16_products", py_bf16_products, METH_VARARGS,
     "bf16_products(a, b, out, init=None, map=None, by_key=False): out[h, m, n] = a[h, m] . "
     "b[h, n], a (heads, m, d) and b (heads, n, d) uint16, the bits of bfloat16, d even; out "
     "(heads, m, n) float32: each product formed as AVX-512 BF16's VDPBF16PS forms it, on every "
     "path (src/dot.h), its sum starting at init[h, n] (float32, (heads, n)) if given, else at "
     "+0.  map (int64, m + other - 1 entries in [-1, n)): only the products a gather through it "
     "reads (rel_gather_add's, these products by key or by query), the others 0."},
    {"rel_scatter_add", py_rel_scatter_add, METH_VARARGS,
     "rel_scatter_add(weights, map, out, single=False, by_key=False): out[b, h, i (j by key), "
     "map[q_len - 1 - i + j]] += "
     "weights[b, h, i, j]; single: on one thread."},
    {"cope", py_cope, METH_VARARGS,
     "cope(attn_logits, query, pos_emb, dst, causal, q_offset, add, gates=False): CoPE's position "
     "logits, interpolated in z = query @ pos_emb (query a row per row of dst, pos_emb (d, npos) "
     "float64, as cope_products makes them), added into the 4-D dst or written (rounded once)."},
    {"cope_grad", py_cope_grad, METH_VARARGS,
     "cope_grad(attn_logits, grad, query, pos_emb, table, d_logits, d_query, d_table, q_len, "
     "causal, q_offset): CoPE's backward of one call, as rows (attn_logits, grad, d_logits (rows, "
     "k_len), query, d_query (rows, d), pos_emb (d, npos) and table (npos, d) float64, d_table "
     "(npos, d) float64): the gradients of the logits, the queries and the table written, each "
     "rounded once."},
    {"cope_products", py_cope_products, METH_VARARGS,
     "cope_products(query, pos_emb, z): z = query @ pos_emb (float64, C-contiguous, 2-D), each "
     "sum in the order of the head dim, without BLAS, the same bits on every path."},
    {"cope_gates", py_cope_gates, METH_VARARGS,
     "cope_gates(attn_logits, gates, exp_only=False): gates[t] = 1 / (1 + exp(-attn_logits[t])) "
     "in float64 by posenc's exp, the kernel's bits (both 1-D float64, contiguous); exp_only: "
     "gates[t] = exp(attn_logits[t]), attn_logits <= 0."},
    {"complex_order", py_complex_order, METH_VARARGS,
     "complex_order(token_ids, positions, amplitude, frequency, phase, real, imag): "
     "r cos(phi) into real, r sin(phi) into imag (or with imag None, the (real, imag) pairs into "
     "real, a complex array's bytes), phi = pos * w + theta in float64, each rounded once; "
     "token_ids int64, positions float64 (n,), the tables (vocab, dim) of the parts' dtype."},
    {"set_num_threads", py_set_num_threads, METH_O,
     "set_num_threads(n): threads for the kernels; 0 follows OpenMP."},
    {"get_num_threads", py_get_num_threads, METH_NOARGS,
     "get_num_threads(): threads the next kernel will use."},
    {"simd_path", py_simd_path, METH_NOARGS,
     "simd_path(): 'avx512', 'avx2', 'neon' or 'scalar', the path in use."},
    {"simd_cpu", py_simd_cpu, METH_NOARGS, "simd_cpu(): the best path this CPU supports."},
    {"simd_paths", py_simd_paths, METH_NOARGS,
     "simd_paths(): the paths this CPU supports, as a tuple, 'scalar' first."},
    {"simd_bf16", py_simd_bf16, METH_NOARGS,
     "simd_bf16(): whether the AVX-512 path uses the CPU's AVX-512 BF16 instructions."},
    {"set_simd_bf16", py_set_simd_bf16, METH_O,
     "set_simd_bf16(on): False leaves AVX-512 BF16 out of the AVX-512 path (for the tests); "
     "returns the setting before."},
    {"set_simd", py_set_simd, METH_O,
     "set_simd(name): 'auto', 'scalar', 'avx2', 'avx512' or 'neon'; returns the path now in "
     "use."},
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
    module_threads_init();
    return m;
}