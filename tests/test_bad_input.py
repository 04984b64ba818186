"""Bad input across the whole public API, one row per argument and kind of
mistake: each raises TypeError or ValueError, and the message names the
argument.  A row with `out=` also checks that the failed call left it as it
was."""

import tracemalloc
from fractions import Fraction

import numpy as np
import pytest
from optional import require

import posenc
from posenc import probe

X = np.ones((1, 2, 4, 8), np.float32)
TABLE = np.ones((32, 4), np.float32)
E = np.random.default_rng(0).standard_normal((40, 8))


def sentinel(shape, dtype=np.float32):
    return np.full(shape, 7.0, dtype)


# (id, call, exception, words the message must contain)
ROWS = [
    # sinusoid
    ("sinusoid dim odd", lambda: posenc.sinusoid(4, 7), ValueError, "dim"),
    ("sinusoid dim str", lambda: posenc.sinusoid(4, "8"), TypeError, "dim"),
    ("sinusoid positions neg", lambda: posenc.sinusoid(-3, 8), ValueError, "positions"),
    ("sinusoid positions str", lambda: posenc.sinusoid("abc", 8), TypeError, "positions"),
    ("sinusoid positions nan", lambda: posenc.sinusoid([np.nan], 8), ValueError, "positions"),
    ("sinusoid base neg", lambda: posenc.sinusoid(4, 8, base=-1.0), ValueError, "base"),
    ("sinusoid layout", lambda: posenc.sinusoid(4, 8, layout="half"), ValueError, "layout"),
    ("sinusoid dtype", lambda: posenc.sinusoid(4, 8, dtype=np.int16), TypeError, "dtype"),
    ("sinusoid out shape", lambda: posenc.sinusoid(4, 8, out=sentinel((4, 6))), ValueError, "out"),
    # rope_frequencies
    ("rope_frequencies dim odd", lambda: posenc.rope_frequencies(7), ValueError, "dim"),
    ("rope_frequencies dim neg", lambda: posenc.rope_frequencies(-8), ValueError, "dim"),
    ("rope_frequencies base", lambda: posenc.rope_frequencies(8, base=0.0), ValueError, "base"),
    (
        "rope_frequencies scaling type",
        lambda: posenc.rope_frequencies(8, scaling={"rope_type": "nope"}),
        ValueError,
        "nope",
    ),
    (
        "rope_frequencies scaling missing key",
        lambda: posenc.rope_frequencies(8, scaling={"rope_type": "linear"}),
        ValueError,
        "factor",
    ),
    (
        "rope_frequencies scaling not a dict",
        lambda: posenc.rope_frequencies(8, scaling="linear"),
        TypeError,
        "scaling",
    ),
    # rope_cos_sin
    ("rope_cos_sin dim odd", lambda: posenc.rope_cos_sin(4, 7), ValueError, "dim"),
    ("rope_cos_sin layout", lambda: posenc.rope_cos_sin(4, 8, layout="x"), ValueError, "layout"),
    ("rope_cos_sin dtype", lambda: posenc.rope_cos_sin(4, 8, dtype="int8"), TypeError, "dtype"),
    ("rope_cos_sin positions", lambda: posenc.rope_cos_sin("a", 8), TypeError, "positions"),
    # apply_rope
    ("apply_rope x int", lambda: posenc.apply_rope(X.astype(int)), TypeError, "x"),
    ("apply_rope x 0-d", lambda: posenc.apply_rope(np.float32(1)), ValueError, "x"),
    ("apply_rope x odd dim", lambda: posenc.apply_rope(np.ones((4, 7))), ValueError, "dim"),
    ("apply_rope rotary odd", lambda: posenc.apply_rope(X, rotary_dim=3), ValueError, "rotary_dim"),
    (
        "apply_rope rotary big",
        lambda: posenc.apply_rope(X, rotary_dim=10),
        ValueError,
        "rotary_dim",
    ),
    ("apply_rope layout", lambda: posenc.apply_rope(X, layout="neox"), ValueError, "layout"),
    ("apply_rope seq_axis", lambda: posenc.apply_rope(X, seq_axis=-1), ValueError, "seq_axis"),
    ("apply_rope seq_axis 9", lambda: posenc.apply_rope(X, seq_axis=9), ValueError, "seq_axis"),
    (
        "apply_rope positions shape",
        lambda: posenc.apply_rope(X, np.arange(5)),
        ValueError,
        "positions",
    ),
    (
        "apply_rope positions nan",
        lambda: posenc.apply_rope(X, [np.nan] * 4),
        ValueError,
        "positions",
    ),
    ("apply_rope offset", lambda: posenc.apply_rope(X, offset="1"), TypeError, "offset"),
    (
        "apply_rope out shape",
        lambda: posenc.apply_rope(X, out=sentinel((1, 2, 4, 6))),
        ValueError,
        "out",
    ),
    (
        "apply_rope out dtype",
        lambda: posenc.apply_rope(X, out=sentinel(X.shape, np.float64)),
        TypeError,
        "out",
    ),
    # alibi
    ("alibi_slopes zero", lambda: posenc.alibi_slopes(0), ValueError, "n_heads"),
    ("alibi_slopes float", lambda: posenc.alibi_slopes(2.5), TypeError, "n_heads"),
    (
        "alibi_slopes max_bias",
        lambda: posenc.alibi_slopes(8, max_bias=np.inf),
        ValueError,
        "max_bias",
    ),
    ("alibi_bias heads", lambda: posenc.alibi_bias(0, 4), ValueError, "n_heads"),
    ("alibi_bias q_len", lambda: posenc.alibi_bias(2, 0), ValueError, "q_len"),
    ("alibi_bias q > k", lambda: posenc.alibi_bias(2, 8, 4), ValueError, "q_len"),
    ("alibi_bias slopes len", lambda: posenc.alibi_bias(2, 4, slopes=[1.0]), ValueError, "slopes"),
    ("alibi_bias dtype", lambda: posenc.alibi_bias(2, 4, dtype="int32"), TypeError, "dtype"),
    (
        "alibi_bias scores shape",
        lambda: posenc.alibi_bias(2, 4, scores=sentinel((2, 4, 5))),
        ValueError,
        "scores",
    ),
    (
        "alibi_bias scores int",
        lambda: posenc.alibi_bias(2, 4, scores=np.zeros((2, 4, 4), np.int32)),
        TypeError,
        "scores",
    ),
    ("alibi_bias out", lambda: posenc.alibi_bias(2, 4, out=sentinel((2, 4, 5))), ValueError, "out"),
    # T5 and Shaw
    (
        "bucket num_buckets",
        lambda: posenc.relative_position_bucket([1, 2], num_buckets=1),
        ValueError,
        "num_buckets",
    ),
    (
        "bucket max_distance",
        lambda: posenc.relative_position_bucket([1], max_distance=0),
        ValueError,
        "max_distance",
    ),
    (
        "bucket float",
        lambda: posenc.relative_position_bucket([1.5]),
        TypeError,
        "relative_position",
    ),
    ("t5_bias table rank", lambda: posenc.t5_bias(np.ones(32), 4), ValueError, "table"),
    ("t5_bias table int", lambda: posenc.t5_bias(np.ones((32, 4), int), 4), TypeError, "table"),
    ("t5_bias q_len", lambda: posenc.t5_bias(TABLE, -1), ValueError, "q_len"),
    (
        "t5_bias scores shape",
        lambda: posenc.t5_bias(TABLE, 4, scores=sentinel((3, 4, 4))),
        ValueError,
        "scores",
    ),
    ("relative_positions q_len", lambda: posenc.relative_positions(0), ValueError, "q_len"),
    (
        "relative_positions max_distance",
        lambda: posenc.relative_positions(4, max_distance=-1),
        ValueError,
        "max_distance",
    ),
    # probes
    ("absolute E 1-D", lambda: probe.absolute_position_regression(np.ones(10)), ValueError, "E"),
    (
        "absolute E nan",
        lambda: probe.absolute_position_regression(np.full((20, 4), np.nan)),
        ValueError,
        "E",
    ),
    ("absolute folds", lambda: probe.absolute_position_regression(E, folds=1), ValueError, "folds"),
    ("order pairs", lambda: probe.relative_order_classification(E, pairs=0), ValueError, "pairs"),
    ("cosine E str", lambda: probe.cosine_similarity(np.array([["a"]])), TypeError, "E"),
    ("skip k", lambda: probe.skip_positions(10, 0), ValueError, "k"),
    ("decay dim", lambda: probe.rope_long_term_decay(7, 100), ValueError, "dim"),
    (
        "load missing file",
        lambda: probe.load_position_embeddings("/nonexistent.npy"),
        FileNotFoundError,  # as numpy.load
        "source",
    ),
    # the remaining arguments, one row each
    ("rope_cos_sin base", lambda: posenc.rope_cos_sin(4, 8, base=-1), ValueError, "base"),
    ("rope_cos_sin scaling", lambda: posenc.rope_cos_sin(4, 8, scaling=3), TypeError, "scaling"),
    (
        "rope_frequencies seq_len",
        lambda: posenc.rope_frequencies(8, seq_len=2.5),
        TypeError,
        "seq_len",
    ),
    ("apply_rope base", lambda: posenc.apply_rope(X, base="x"), TypeError, "base"),
    (
        "apply_rope scaling key",
        lambda: posenc.apply_rope(X, scaling={"rope_type": "yarn"}),
        ValueError,
        "original_max_position_embeddings",
    ),
    ("apply_rope inverse", lambda: posenc.apply_rope(X, inverse="yes"), TypeError, "inverse"),
    (
        "apply_rope out read-only",
        lambda: posenc.apply_rope(X, out=np.broadcast_to(np.zeros(8, np.float32), X.shape)),
        ValueError,
        "out",
    ),
    ("apply_rope out list", lambda: posenc.apply_rope(X, out=[1]), TypeError, "out"),
    ("alibi_bias causal", lambda: posenc.alibi_bias(2, 4, causal="no"), TypeError, "causal"),
    ("alibi_bias q_offset", lambda: posenc.alibi_bias(2, 4, q_offset=1.5), TypeError, "q_offset"),
    ("alibi_bias max_bias", lambda: posenc.alibi_bias(2, 4, max_bias=-1), ValueError, "max_bias"),
    ("alibi_bias k_len", lambda: posenc.alibi_bias(2, 4, "8"), TypeError, "k_len"),
    (
        "alibi_bias slopes str",
        lambda: posenc.alibi_bias(2, 4, slopes=["a", "b"]),
        TypeError,
        "slopes",
    ),
    (
        "alibi_bias scores and out",
        lambda: posenc.alibi_bias(2, 4, scores=sentinel((2, 4, 4)), out=sentinel((2, 4, 4))),
        ValueError,
        "scores",
    ),
    (
        "bucket bidirectional",
        lambda: posenc.relative_position_bucket([1], bidirectional="x"),
        TypeError,
        "bidirectional",
    ),
    (
        "bucket num_buckets float",
        lambda: posenc.relative_position_bucket([1], num_buckets=3.5),
        TypeError,
        "num_buckets",
    ),
    (
        "t5_bias bidirectional",
        lambda: posenc.t5_bias(TABLE, 4, bidirectional=None),
        TypeError,
        "bidirectional",
    ),
    ("t5_bias q_offset", lambda: posenc.t5_bias(TABLE, 4, q_offset="a"), TypeError, "q_offset"),
    ("t5_bias k_len", lambda: posenc.t5_bias(TABLE, 4, 0), ValueError, "k_len"),
    (
        "t5_bias out dtype",
        lambda: posenc.t5_bias(TABLE, 4, out=sentinel((4, 4, 4), np.float64)),
        TypeError,
        "out",
    ),
    ("relative_positions k_len", lambda: posenc.relative_positions(4, 0), ValueError, "k_len"),
    (
        "relative_positions q_offset",
        lambda: posenc.relative_positions(4, q_offset=1.5),
        TypeError,
        "q_offset",
    ),
    (
        "relative_positions max_distance float",
        lambda: posenc.relative_positions(4, max_distance=2.5),
        TypeError,
        "max_distance",
    ),
    ("order folds", lambda: probe.relative_order_classification(E, folds=0), ValueError, "folds"),
    ("order seed", lambda: probe.relative_order_classification(E, seed="a"), TypeError, "seed"),
    ("absolute seed", lambda: probe.absolute_position_regression(E, seed=-1), ValueError, "seed"),
    ("informativeness center", lambda: probe.informativeness(E, center="x"), TypeError, "center"),
    ("rank_for share", lambda: probe.informativeness(E).rank_for(1.5), ValueError, "share"),
    ("skip n", lambda: probe.skip_positions(-1, 2), ValueError, "n"),
    ("decay max_distance", lambda: probe.rope_long_term_decay(8, -1), ValueError, "max_distance"),
    ("decay base", lambda: probe.rope_long_term_decay(8, 10, base=0), ValueError, "base"),
    ("report seeds", lambda: probe.report(E, name="x", seeds=0), ValueError, "seeds"),
    ("report name", lambda: probe.report(E, name=3), TypeError, "name"),
    (
        "load key",
        lambda: probe.load_position_embeddings({"a": np.ones((4, 4))}, key="b"),
        ValueError,
        "key",
    ),
    ("load source type", lambda: probe.load_position_embeddings(3.5), TypeError, "source"),
    ("set_num_threads str", lambda: posenc.set_num_threads("2"), TypeError, "n"),
]

# M-RoPE and axial RoPE: x of 8 pairs, three rows of positions
X16 = np.ones((1, 2, 4, 16), np.float32)
IDS3 = np.zeros((3, 1, 4), np.int64)
IDS2 = np.zeros((2, 4), np.int64)
MROPE_QWEN2 = {"rope_type": "default", "mrope_section": [4, 2, 2], "mrope_interleaved": False}


def _mrope(positions=IDS3, x=X16, **kw):
    return lambda: posenc.apply_rope(x, positions, **kw)


ROWS += [
    ("mrope sum", _mrope(mrope_section=[4, 2, 1]), ValueError, "mrope_section .* add up to"),
    ("mrope rows", _mrope(IDS3[:2], mrope_section=[4, 2, 2]), ValueError, "positions .* 3 rows"),
    ("mrope float", _mrope(mrope_section=[4.0, 2, 2]), TypeError, "mrope_section\\[0\\]"),
    ("mrope str", _mrope(mrope_section="422"), TypeError, "mrope_section"),
    ("mrope dict", _mrope(mrope_section={"t": 4}), TypeError, "mrope_section"),
    ("mrope 2-d", _mrope(mrope_section=np.ones((2, 2), int)), ValueError, "mrope_section"),
    ("mrope negative", _mrope(mrope_section=[6, -1, 3]), ValueError, "mrope_section\\[1\\]"),
    ("mrope empty", _mrope(mrope_section=[]), ValueError, "mrope_section"),
    ("mrope bool flag", _mrope(mrope_section=[4, 2, 2], mrope_interleaved=1), TypeError,
     "mrope_interleaved"),
    ("mrope flag alone", _mrope(mrope_interleaved=True), ValueError, "mrope_interleaved"),
    ("mrope interleaved range", _mrope(mrope_section=[2, 3, 3], mrope_interleaved=True),
     ValueError, "interleaved mrope_section"),
    ("mrope too many", _mrope(np.zeros((17, 4)), mrope_section=[1] * 8 + [0] * 9), ValueError,
     "at most 16"),
    ("mrope no positions", _mrope(None, mrope_section=[4, 2, 2]), ValueError, "positions"),
    ("mrope scalar positions", _mrope(3.0, mrope_section=[4, 2, 2]), ValueError, "positions"),
    ("mrope positions shape", _mrope(np.zeros((3, 5)), mrope_section=[4, 2, 2]), ValueError,
     "positions"),
    ("mrope config disagrees", _mrope(scaling=MROPE_QWEN2, mrope_section=[2, 4, 2]), ValueError,
     "disagrees"),
    ("mrope config flag disagrees", _mrope(scaling=MROPE_QWEN2, mrope_interleaved=True),
     ValueError, "mrope_interleaved"),
    ("mrope config float", _mrope(scaling={"mrope_section": [4, 2, 2.5]}), TypeError,
     "mrope_section"),
    ("mrope config plain positions", _mrope(np.arange(4), scaling=MROPE_QWEN2), ValueError,
     "mrope_section .* 3 rows"),
    ("rows without sections", _mrope(np.zeros((3, 2, 4))), ValueError, "mrope_section="),
    ("mrope cos_sin length", lambda: posenc.rope_cos_sin(4, 16, mrope_section=[4, 2, 2]),
     ValueError, "positions"),
    ("mrope cos_sin sum", lambda: posenc.rope_cos_sin(IDS3, 16, mrope_section=[4, 4, 4]),
     ValueError, "add up"),
    ("axial rows", _mrope(IDS3, axial=2), ValueError, "positions .* 2 rows"),
    ("axial uneven", _mrope(IDS3, axial=3), ValueError, "axial"),
    ("axial zero", _mrope(IDS2, axial=0), ValueError, "axial"),
    ("axial bool", _mrope(IDS2, axial=True), TypeError, "axial"),
    ("axial float", _mrope(IDS2, axial=2.0), TypeError, "axial"),
    ("axial sum", _mrope(IDS2, axial=[4, 3]), ValueError, "axial"),
    ("axial empty axis", _mrope(IDS2, axial=[8, 0]), ValueError, "axial"),
    ("axial and mrope", _mrope(IDS3, axial=3, mrope_section=[4, 2, 2]), ValueError, "axial"),
    ("axial scaled", _mrope(IDS2, axial=2, scaling={"rope_type": "linear", "factor": 2.0}),
     ValueError, "axial"),
    ("axial no positions", _mrope(None, axial=2), ValueError, "positions"),
    ("axial cos_sin length", lambda: posenc.rope_cos_sin(4, 16, axial=2), ValueError,
     "positions"),
    ("vision grids float", lambda: posenc.vision_position_ids([[1.0, 2, 2]]), TypeError, "grids"),
    ("vision grids shape", lambda: posenc.vision_position_ids([[1, 2]]), ValueError, "grids"),
    ("vision grids zero", lambda: posenc.vision_position_ids([[1, 0, 2]]), ValueError, "grids"),
    ("vision merge", lambda: posenc.vision_position_ids([[1, 3, 4]], spatial_merge_size=2),
     ValueError, "spatial_merge_size"),
    ("vision merge zero", lambda: posenc.vision_position_ids([[1, 2, 2]], spatial_merge_size=0),
     ValueError, "spatial_merge_size"),
    ("vision convention", lambda: posenc.vision_position_ids([[1, 2, 2]], convention="vit"),
     ValueError, "convention"),
    ("vision llama4 merge", lambda: posenc.vision_position_ids(4, convention="llama4",
                                                               spatial_merge_size=2),
     ValueError, "spatial_merge_size"),
    ("vision llama4 shape", lambda: posenc.vision_position_ids([1, 2, 3], convention="llama4"),
     ValueError, "grids"),
]  # fmt: skip


@pytest.mark.parametrize("call, exc, words", [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_bad_input_raises_a_clear_error(call, exc, words):
    with pytest.raises(exc, match=words):
        call()


# (id, call with the given out/scores array, its shape and dtype)
OUT_ROWS = [
    ("sinusoid nan", lambda o: posenc.sinusoid([0.0, np.nan], 4, out=o), (2, 4), np.float32),
    (
        "apply_rope bad positions",
        lambda o: posenc.apply_rope(X, np.arange(9), out=o),
        X.shape,
        np.float32,
    ),
    (
        "apply_rope bad sections",
        lambda o: posenc.apply_rope(X16, IDS3, mrope_section=[4, 2, 1], out=o),
        X16.shape,
        np.float32,
    ),
    (
        "apply_rope axial rows",
        lambda o: posenc.apply_rope(X16, IDS3, axial=2, out=o),
        X16.shape,
        np.float32,
    ),
    (
        "alibi bad slopes",
        lambda o: posenc.alibi_bias(2, 4, slopes=[np.nan, 1.0], out=o),
        (2, 4, 4),
        np.float32,
    ),
    (
        "alibi scores bad slopes",
        lambda o: posenc.alibi_bias(2, 4, slopes=[1.0], scores=o),
        (2, 4, 4),
        np.float32,
    ),
    (
        "t5 bad max_distance",
        lambda o: posenc.t5_bias(TABLE, 4, max_distance=0, out=o),
        (4, 4, 4),
        np.float32,
    ),
]


@pytest.mark.parametrize(
    "call, shape, dtype", [r[1:] for r in OUT_ROWS], ids=[r[0] for r in OUT_ROWS]
)
def test_failed_call_leaves_out_untouched(call, shape, dtype):
    out = sentinel(shape, dtype)
    with pytest.raises((TypeError, ValueError)):
        call(out)
    assert (out == 7.0).all()


# ---------------------------------------------------------------- sizes, wrap-around, ranges

BIG = 2**40  # far more than any machine's memory, in any table made of it

# (id, call, the argument(s) its message must name): each result cannot be
# made, and is refused from the sizes given before anything is allocated
SIZE_ROWS = [
    ("rope_cos_sin dim", lambda: posenc.rope_cos_sin(4, 2**62), "dim"),
    ("rope_cos_sin dim 2**40", lambda: posenc.rope_cos_sin(4, BIG), "dim"),
    ("rope_cos_sin no positions", lambda: posenc.rope_cos_sin(0, 2**62), "dim"),
    ("rope_cos_sin positions", lambda: posenc.rope_cos_sin(BIG, 8), "positions"),
    ("rope_frequencies dim", lambda: posenc.rope_frequencies(2**62), "dim"),
    ("rope_frequencies dim 2**40", lambda: posenc.rope_frequencies(BIG), "dim"),
    ("sinusoid dim", lambda: posenc.sinusoid(4, BIG), "dim"),
    ("sinusoid no positions", lambda: posenc.sinusoid(0, 2**62), "dim"),
    ("apply_rope broadcast x", lambda: posenc.apply_rope(np.broadcast_to(np.float32(1), (BIG, 8))),
     "x"),
    ("apply_rope empty x", lambda: posenc.apply_rope(np.zeros((0, BIG), np.float16)), "x"),
    ("vision llama4 2**32", lambda: posenc.vision_position_ids(2**32, convention="llama4"),
     "grids"),
    ("vision llama4 2**20", lambda: posenc.vision_position_ids(2**20, convention="llama4"),
     "grids"),
    ("vision llama4 2**64", lambda: posenc.vision_position_ids(2**64, convention="llama4"),
     "grids"),
    ("vision qwen", lambda: posenc.vision_position_ids([[1, 2**20, 2**20]]), "grids"),
    ("vision qwen wraps", lambda: posenc.vision_position_ids([[1, 2**40, 2**40]]), "grids"),
    ("vision merge 2**63", lambda: posenc.vision_position_ids(
        [[1, 2, 2]], spatial_merge_size=2**63), "spatial_merge_size"),
    ("mrope merge 2**63", lambda: posenc.mrope_position_ids(
        [0, 1], image_grids=[[1, 2, 2]], spatial_merge_size=2**63), "spatial_merge_size"),
    ("cu_seqlens 2**40", lambda: posenc.positions_from_cu_seqlens([0, BIG]), "cu_seqlens"),
    ("cu_seqlens 2**64", lambda: posenc.positions_from_cu_seqlens([0, 2**64]), "cu_seqlens"),
    ("attention_temperature", lambda: posenc.attention_temperature(BIG), "positions"),
    ("mrope frames apart", lambda: posenc.mrope_position_ids(
        [0, 2, 2, 2, 2], video_grids=[[BIG, 4, 4]], video_frames_apart=True), "video_grids"),
    ("permute_rope_weight", lambda: posenc.permute_rope_weight(
        np.broadcast_to(np.float32(1), (BIG, 8)), 2), "weight"),
    ("alibi_slopes", lambda: posenc.alibi_slopes(BIG), "n_heads"),
    ("alibi_slopes 2**70", lambda: posenc.alibi_slopes(2**70), "n_heads"),
    ("alibi_bias n_heads", lambda: posenc.alibi_bias(BIG, 4), "n_heads"),
    ("alibi_bias q_len", lambda: posenc.alibi_bias(4, 2**20), "q_len"),
    ("t5_bias q_len", lambda: posenc.t5_bias(TABLE, 2**20), "q_len"),
    ("relative_positions", lambda: posenc.relative_positions(2**20, 2**21), "q_len and k_len"),
    ("relative_position_bucket", lambda: posenc.relative_position_bucket(
        np.broadcast_to(np.int64(1), (BIG,))), "relative_position"),
    # counts that set work in Python or per element, whatever the result's size
    ("irope_layers layers", lambda: posenc.irope_layers({"num_hidden_layers": BIG}),
     "num_hidden_layers"),
    ("irope_layers moe_layers", lambda: posenc.irope_layers(
        {"num_hidden_layers": 4, "moe_layers": range(BIG)}), "moe_layers"),
    ("randomized batch", lambda: posenc.randomized_position_ids(0, 4, batch=BIG), "batch"),
    ("pose batch", lambda: posenc.pose_position_ids(1, 4, batch=BIG), "batch"),
    ("sandwich_bias dim", lambda: posenc.sandwich_bias(1, 2, dim=BIG), "dim"),
    ("chunked_causal_mask", lambda: posenc.chunked_causal_mask(2, BIG, chunk_size=4),
     "q_len and k_len"),
]  # fmt: skip


@pytest.mark.parametrize("call, name", [r[1:] for r in SIZE_ROWS], ids=[r[0] for r in SIZE_ROWS])
def test_a_size_too_large_is_a_value_error_naming_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()


@pytest.mark.parametrize(
    "call",
    [
        # the positions 0..2**24 - 1 (128 MiB) were made before the tables were found too large
        lambda: posenc.rope_cos_sin(2**24, 2**20),
        # 2**22 frames (100 MiB of grids) were made before the prompt was found to hold one
        lambda: posenc.mrope_position_ids(
            [0, 2, 2, 2, 2], video_grids=[[2**22, 4, 4]], video_frames_apart=True
        ),
    ],
    ids=["rope_cos_sin", "mrope_position_ids"],
)
def test_a_call_too_large_is_refused_before_anything_is_allocated(call):
    tracemalloc.start()
    try:
        with pytest.raises(ValueError):
            call()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20


def test_a_result_larger_than_the_machines_memory_is_refused(monkeypatch):
    from posenc import _validate

    # a machine of 1000 bytes: a table of 100 x 8 float32 (3200 bytes) does not fit
    monkeypatch.setattr(_validate, "memory_limit", lambda: (1000, "this machine's memory"))
    with pytest.raises(ValueError, match="positions and dim: .* this machine's memory"):
        posenc.sinusoid(100, 8)
    assert posenc.sinusoid(10, 8, dtype="float16").shape == (10, 8)  # 160 bytes


def test_an_out_larger_than_the_machines_memory_is_written(monkeypatch):
    from posenc import _validate

    # out= exists already (a memmap may be larger than memory): written, not refused
    monkeypatch.setattr(_validate, "memory_limit", lambda: (1000, "this machine's memory"))
    out = sentinel((100, 8))
    assert posenc.sinusoid(100, 8, out=out) is out
    np.testing.assert_allclose(out[:, 1], np.cos(np.arange(100)), atol=1e-6)  # cos(p w_0)
    out = sentinel((2, 12, 12))
    assert posenc.alibi_bias(2, 12, out=out) is out
    assert out[0, 11, 0] == -11 * 2.0**-4  # slope 2 ** (-8 / 2) of head 0, by hand
    x = np.ones((100, 8), np.float32)
    assert posenc.apply_rope(x, out=x) is x
    with pytest.raises(ValueError, match="x: .* this machine's memory"):
        posenc.apply_rope(x)


INT64_MAX = 2**63 - 1

# (id, call, exception, words the message must contain): results that wrapped
# around int64, or were -inf / NaN / garbage, refused by name
RANGE_ROWS = [
    ("cu_seqlens start wraps", lambda: posenc.positions_from_cu_seqlens([0, 3], start=2**63 - 2),
     ValueError, "start"),
    ("cu_seqlens start 2**64", lambda: posenc.positions_from_cu_seqlens([0, 3], start=2**64),
     ValueError, "start"),
    ("cu_seqlens start below int64", lambda: posenc.positions_from_cu_seqlens(
        [0, 3], start=-(2**63) - 1), ValueError, "start"),
    ("temperature negative", lambda: posenc.attention_temperature([-8193, -20000]), ValueError,
     "positions must be >= 0"),
    ("temperature -2", lambda: posenc.attention_temperature([0, -2]), ValueError,
     "positions must be >= 0"),
    ("temperature floor_scale", lambda: posenc.attention_temperature([5], floor_scale=1e-320),
     ValueError, "floor_scale"),
    ("temperature attn_scale", lambda: posenc.attention_temperature([2**20], attn_scale=1e308),
     ValueError, "attn_scale"),
    ("mrope interval nan", lambda: _video_intervals([np.nan]), ValueError, "video_time_intervals"),
    ("mrope interval inf", lambda: _video_intervals([np.inf]), ValueError, "video_time_intervals"),
    ("mrope interval 1e30", lambda: _video_intervals([1e30]), ValueError,
     "video_time_intervals\\[0\\]"),
    ("mrope interval 1e39", lambda: _video_intervals([1e39], apart=True), ValueError,
     "video_time_intervals"),
    ("mrope interval negative", lambda: _video_intervals([-1.0]), ValueError,
     "video_time_intervals must be >= 0"),
    ("mrope interval str", lambda: _video_intervals(["a"]), TypeError, "video_time_intervals"),
    # t * h/2 * w/2 = (2**62 + 1) * 4 wraps int64 to the 4 tokens of the video
    ("mrope grid wraps", lambda: posenc.mrope_position_ids(
        [0, 2, 2, 2, 2], video_grids=[[2**62 + 1, 2, 8]]), ValueError,
     "video 0 .* makes 18446744073709551620"),
    ("mrope grid past int64", lambda: posenc.mrope_position_ids(
        [0, 2, 2, 2, 2], video_grids=np.array([[2**63, 2, 2]], np.uint64)), ValueError,
     "video_grids .* int64"),
    ("mrope mask nan", lambda: posenc.mrope_position_ids([0, 0], attention_mask=[1.0, np.nan]),
     ValueError, "attention_mask"),
    ("mrope mask 2", lambda: posenc.mrope_position_ids([0, 0], attention_mask=[2, 1]),
     ValueError, "attention_mask"),
    ("vision grid past int64", lambda: posenc.vision_position_ids(
        np.array([[1, 2**63, 2]], np.uint64)), ValueError, "grids .* int64"),
]  # fmt: skip


def _video_intervals(intervals, apart=False):
    """A prompt of one video of 2 frames of 2 x 2 merged patches."""
    return posenc.mrope_position_ids(
        [0] + [2] * 8,
        video_grids=[[2, 4, 4]],
        video_time_intervals=intervals,
        video_frames_apart=apart,
    )


@pytest.mark.parametrize(
    "call, exc, words", [r[1:] for r in RANGE_ROWS], ids=[r[0] for r in RANGE_ROWS]
)
def test_values_out_of_range_raise_a_clear_error(call, exc, words):
    with pytest.raises(exc, match=words):
        call()


# real arguments given as integers (or fractions) past float64's range: float()
# of them raised OverflowError
HUGE = 10**400
W1, B1, W2, B2 = np.ones((4, 1)), np.zeros(4), np.ones((2, 4)), np.zeros(2)
HUGE_REAL_ROWS = [
    ("sinusoid base", lambda v: posenc.sinusoid(4, 8, base=v), "base"),
    ("rope_frequencies base", lambda v: posenc.rope_frequencies(8, base=v), "base"),
    ("rope_frequencies factor", lambda v: posenc.rope_frequencies(
        8, scaling={"rope_type": "linear", "factor": v}), r"scaling\['factor'\]"),
    ("rope_cos_sin xpos_centre", lambda v: posenc.rope_cos_sin(4, 8, xpos="key", xpos_centre=v),
     "xpos_centre"),
    ("apply_rope offset", lambda v: posenc.apply_rope(X, offset=v), "offset"),
    ("alibi_slopes max_bias", lambda v: posenc.alibi_slopes(4, max_bias=v), "max_bias"),
    ("alibi_bias max_bias", lambda v: posenc.alibi_bias(4, 3, max_bias=v), "max_bias"),
    ("temperature attn_scale", lambda v: posenc.attention_temperature(4, attn_scale=v),
     "attn_scale"),
    ("xl_relative_table base", lambda v: posenc.xl_relative_table(3, 3, 8, base=v), "base"),
    ("fire threshold", lambda v: posenc.fire_bias(W1, B1, W2, B2, 1.0, v, 3), "threshold"),
]  # fmt: skip


@pytest.mark.parametrize("call, name", [r[1:] for r in HUGE_REAL_ROWS],
                         ids=[r[0] for r in HUGE_REAL_ROWS])  # fmt: skip
@pytest.mark.parametrize("value", [HUGE, -HUGE, Fraction(HUGE, 3)], ids=["int", "-int", "Fraction"])
def test_reals_past_float64s_range_are_value_errors_naming_them(call, name, value):
    with pytest.raises(ValueError, match=f"^{name} must be finite, got .* past float64's range"):
        call(value)


# the position helpers' integer arguments at int64's edges, as Python and
# NumPy integers: a bound named, a bool a TypeError (the samplers' and the
# chunked mask's are in test_samplers.py and test_irope.py)
HELPER_INT_ROWS = [
    ("start 2**63", lambda v: posenc.positions_from_cu_seqlens([0, 2], start=v), 2**63,
     ValueError, "start"),
    ("start uint64 max", lambda v: posenc.positions_from_cu_seqlens([0, 2], start=v),
     np.uint64(2**64 - 1), ValueError, "start"),
    ("start bool", lambda v: posenc.positions_from_cu_seqlens([0, 2], start=v), np.True_,
     TypeError, "start must be an integer"),
    ("mrope merge int64 max", lambda v: posenc.mrope_position_ids([0, 0], spatial_merge_size=v),
     np.int64(INT64_MAX), ValueError, "spatial_merge_size must be <="),
    ("mrope merge int64 min", lambda v: posenc.mrope_position_ids([0, 0], spatial_merge_size=v),
     np.int64(-(2**63)), ValueError, "spatial_merge_size must be >= 1"),
    ("mrope merge bool", lambda v: posenc.mrope_position_ids([0, 0], spatial_merge_size=v), True,
     TypeError, "spatial_merge_size must be an integer"),
    ("vision merge uint64", lambda v: posenc.vision_position_ids([1, 2, 2], spatial_merge_size=v),
     np.uint64(2**63), ValueError, "spatial_merge_size must be <="),
    ("vision merge bool", lambda v: posenc.vision_position_ids([1, 2, 2], spatial_merge_size=v),
     np.False_, TypeError, "spatial_merge_size must be an integer"),
    ("vision llama4 2**63", lambda v: posenc.vision_position_ids(v, convention="llama4"), 2**63,
     ValueError, "grids must hold integers within int64"),
    ("vision llama4 int64 min", lambda v: posenc.vision_position_ids(v, convention="llama4"),
     np.int64(-(2**63)), ValueError, "grids must hold sizes >= 1"),
]  # fmt: skip


@pytest.mark.parametrize(
    "call, value, exc, words", [r[1:] for r in HELPER_INT_ROWS], ids=[r[0] for r in HELPER_INT_ROWS]
)
def test_position_helpers_refuse_integers_past_their_range_by_name(call, value, exc, words):
    with pytest.raises(exc, match=words):
        call(value)


def test_edges_of_the_ranges_are_computed():
    # the last position that fits int64, by hand
    got = posenc.positions_from_cu_seqlens([0, 2, 3], start=INT64_MAX - 1)
    assert got.tolist() == [INT64_MAX - 1, INT64_MAX, INT64_MAX - 1]
    # ... and the first, as a NumPy integer
    got = posenc.positions_from_cu_seqlens([0, 2, 3], start=np.int64(-(2**63)))
    assert got.tolist() == [-(2**63), -(2**63) + 1, -(2**63)]
    # position 0 and -0.0 give Llama 4's factor 1, 8191 the first step: 1 + 0.1 log 2
    got = posenc.attention_temperature([0.0, -0.0, 8190, 8191])
    np.testing.assert_array_equal(got, [1.0, 1.0, 1.0, 1.0 + 0.1 * np.log(2.0)])
    # an interval of 0 keeps every frame at the video's start, as transformers computes it
    ids, _ = _video_intervals([0.0])
    assert ids[0].tolist() == [0] + [1] * 8


# ---------------------------------------------------------------- out= and scores= sharing memory
#
# An out= or scores= whose elements share memory (a zero stride, as of an
# expanded tensor or a writeable broadcast view, or rows that overlap)
# would receive several results in one place; it is refused, NumPy arrays
# and torch tensors alike (eager, and recorded by autograd: the operators'
# path), before anything is written.

Q4 = np.linspace(-1, 1, 48, dtype=np.float32).reshape(2, 2, 3, 4)
H4 = np.ones((2, 4), np.float32)  # a per-head vector (bias)
R6 = np.ones((2, 6, 4), np.float32)  # a table of rows per head
P4 = np.ones((2, 4, 4), np.float32)  # DeBERTa's projections, TUPE's pos_q / pos_k
T2 = np.ones((32, 2), np.float32)  # a T5 table of two heads
T3 = np.ones((33, 2), np.float32)  # a TUPE table: 32 buckets and the [CLS] row

# (id, argument, its shape, call(target, data)): data(x) is the array x of
# the call's library; data(x, grad=True) marks an argument that autograd
# follows (the torch operators' path)
SHARED_ROWS = [
    ("sinusoid out", "out", (2, 4, 8), lambda o, a: posenc.sinusoid(a(P4[0, :2]), 8, out=o)),
    ("apply_rope out", "out", Q4.shape, lambda o, a: posenc.apply_rope(a(Q4, True), out=o)),
    ("apply_rope out=x", "out", Q4.shape, lambda o, a: posenc.apply_rope(o, out=o)),
    ("alibi_bias out", "out", (2, 3, 3), lambda o, a: posenc.alibi_bias(2, 3, out=o)),
    ("alibi_bias scores", "scores", (2, 2, 3, 3), lambda o, a: posenc.alibi_bias(2, 3, scores=o)),
    ("t5_bias out", "out", (2, 3, 3), lambda o, a: posenc.t5_bias(a(T2, True), 3, out=o)),
    (
        "t5_bias scores",
        "scores",
        (2, 2, 3, 3),
        lambda o, a: posenc.t5_bias(a(T2, True), 3, scores=o),
    ),
    (
        "xl_position_term",
        "scores",
        (2, 2, 3, 3),
        lambda o, a: posenc.xl_position_term(a(Q4, True), a(R6), scores=o),
    ),
    (
        "xl_content_bias",
        "scores",
        (2, 2, 3, 3),
        lambda o, a: posenc.xl_content_bias(a(Q4, True), a(H4), scores=o),
    ),
    (
        "tener_position_term",
        "scores",
        (2, 2, 3, 3),
        lambda o, a: posenc.tener_position_term(a(Q4, True), a(Q4), a(R6[0]), scores=o),
    ),
    (
        "deberta_attention_bias",
        "scores",
        (2, 2, 3, 3),
        lambda o, a: posenc.deberta_attention_bias(
            a(Q4, True), a(Q4), a(P4), a(P4), max_relative_positions=2, scores=o
        ),
    ),
    (
        "shaw_key_term",
        "scores",
        (2, 2, 3, 3),
        lambda o, a: posenc.shaw_key_term(a(Q4, True), a(R6[0, :5]), max_distance=2, scores=o),
    ),
    (
        "tupe_bias",
        "scores",
        (2, 2, 3, 3),
        lambda o, a: posenc.tupe_bias(a(P4, True), a(P4), rel_table=a(T3), scores=o),
    ),
]


def _interleaved_strides(shape):
    """Strides (in elements) of `shape` whose rows overlap by one element
    (the last axis contiguous, a row starting one before the previous row
    ended); the leading axes apart."""
    strides = [1, shape[-1] - 1]
    for n in reversed(shape[1:-1]):
        strides.insert(0, strides[0] * n)
    return tuple(strides)


def _shared_numpy(kind, shape):
    """(target, the buffer it lies in) for NumPy, filled with 7."""
    if kind == "zero stride":
        buf = sentinel(shape[1:])
        strides = (0,) + buf.strides
    else:
        strides = tuple(s * 4 for s in _interleaved_strides(shape))
        buf = sentinel(1 + sum((n - 1) * s for n, s in zip(shape, strides)) // 4)
    target = np.lib.stride_tricks.as_strided(buf, shape, strides, writeable=True)
    return target, buf


def _torch():
    return require("torch")


def _shared_torch(kind, shape, grad):
    """(target, the buffer it lies in) for torch, filled with 7; with
    `grad`, a view of a leaf that requires grad (so that a call writing
    into it is recorded by autograd)."""
    torch = _torch()
    if kind == "zero stride":
        buf = torch.full((1,) + shape[1:], 7.0, requires_grad=grad)
        return buf.expand(shape), buf
    strides = _interleaved_strides(shape)
    size = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    buf = torch.full((size,), 7.0, requires_grad=grad)
    return buf.as_strided(shape, strides), buf


@pytest.mark.parametrize("mode", ["numpy", "torch", "torch autograd"])
@pytest.mark.parametrize("kind", ["zero stride", "interleaved"])
@pytest.mark.parametrize(
    "name, shape, call", [r[1:] for r in SHARED_ROWS], ids=[r[0] for r in SHARED_ROWS]
)
def test_out_and_scores_sharing_memory_are_refused_and_left_untouched(
    name, shape, call, kind, mode
):
    if mode == "numpy":
        target, buf = _shared_numpy(kind, shape)

        def data(x, grad=False):
            return x

    else:
        torch = _torch()
        recorded = mode == "torch autograd"
        target, buf = _shared_torch(kind, shape, recorded)

        def data(x, grad=False):
            return torch.tensor(x, requires_grad=grad and recorded)

    with pytest.raises(ValueError, match=rf"^{name} has elements that share memory"):
        call(target, data)
    assert (np.asarray(buf.tolist()) == 7.0).all()
