"""posenc's API as a user's type checker sees it (not collected by pytest).

.ci/run checks this file with ``mypy tests/typing_usage.py``, which must pass:
``assert_type`` fails unless a call's type is exactly the one written, and each
wrong call carries a ``# type: ignore[code]`` that mypy reports as unused (an
error, with ``warn_unused_ignores``) unless it rejects the call with that code.
The file is never run.
"""

from pathlib import Path
from typing import Any, Dict, Tuple

import numpy as np
from matplotlib.figure import Figure
from numpy.typing import NDArray
from typing_extensions import assert_type

import posenc
from posenc import probe


class _Foreign:
    """What a type checker sees of every foreign array: a shape, a dtype,
    DLPack and ``__array__`` (posenc imports neither torch nor JAX)."""

    shape: Tuple[int, ...]
    dtype: Any

    def __dlpack__(self, *, stream: Any = None) -> Any: ...

    def __dlpack_device__(self) -> Tuple[int, int]:
        raise NotImplementedError

    def __array__(self, dtype: Any = None) -> NDArray[Any]:
        raise NotImplementedError


class Tensor(_Foreign):
    """A torch tensor: the foreign array with ``requires_grad``."""

    requires_grad: bool


class JaxArray(_Foreign):
    """A JAX array: the foreign array with ``sharding``."""

    sharding: Any


class LlamaConfig:
    """A transformers config, duck-typed."""

    rope_theta = 500000.0
    rope_scaling = {"rope_type": "llama3", "factor": 8.0}
    max_position_embeddings = 131072


def numpy_calls(q: NDArray[np.float32], h: NDArray[np.float16], ids: NDArray[np.int64]) -> None:
    assert_type(posenc.apply_rope(q), NDArray[np.float32])
    assert_type(posenc.apply_rope(h, ids, layout="interleaved", out=h), NDArray[np.float16])
    assert_type(posenc.apply_rope(q, scaling=LlamaConfig()), NDArray[np.float32])
    assert_type(posenc.apply_rope([[1.0, 2.0]]), NDArray[Any])
    assert_type(posenc.apply_rope(q, layout="interleaved_to_half"), NDArray[np.float32])
    assert_type(posenc.apply_rope(q, xpos="key", xpos_centre=2048.0), NDArray[np.float32])
    assert_type(posenc.sinusoid(16, 8), NDArray[Any])
    assert_type(posenc.sinusoid(ids, 8, layout="concat", dtype=np.float16), NDArray[Any])
    assert_type(posenc.rope_cos_sin(16, 8, dtype="float16"), Tuple[NDArray[Any], NDArray[Any]])
    assert_type(
        posenc.rope_cos_sin(16, 8, full=False, xpos="query"), Tuple[NDArray[Any], NDArray[Any]]
    )
    inv_freq, factor = posenc.rope_frequencies(128, scaling={"rope_type": "linear", "factor": 2})
    assert_type(inv_freq, NDArray[np.float64])
    assert_type(factor, float)
    assert_type(posenc.alibi_slopes(12), NDArray[np.float64])
    assert_type(posenc.alibi_bias(12, 8), NDArray[Any])
    assert_type(posenc.alibi_bias(12, 8, scores=q), NDArray[np.float32])
    assert_type(posenc.alibi_bias(12, 8, out=h), NDArray[np.float16])
    assert_type(posenc.kerple_bias([1.0], [2.0], 8, kind="power"), NDArray[Any])
    assert_type(posenc.sandwich_bias(12, 8, dim=64, out=None), NDArray[Any])
    assert_type(posenc.relative_position_bucket(ids), NDArray[np.int64])
    assert_type(posenc.relative_position_bucket(3), NDArray[np.int64])
    assert_type(posenc.t5_bias(q, 4, 8), NDArray[np.float32])
    assert_type(posenc.relative_positions(4, max_distance=2), NDArray[np.int64])
    assert_type(posenc.positions_from_cu_seqlens([0, 3, 5]), NDArray[np.int64])
    assert_type(posenc.permute_rope_weight(q, 4, to="interleaved"), NDArray[np.float32])
    assert_type(posenc.attention_temperature(ids), NDArray[np.float64])
    assert_type(posenc.mrope_position_ids(ids), Tuple[NDArray[np.int64], NDArray[np.int64]])
    assert_type(posenc.apply_rope(q, ids, mrope_section=[16, 24, 24]), NDArray[np.float32])
    assert_type(
        posenc.apply_rope(h, ids, mrope_section=(24, 20, 20), mrope_interleaved=True),
        NDArray[np.float16],
    )
    assert_type(posenc.apply_rope(q, ids, axial=2, seq_axis=-3), NDArray[np.float32])
    assert_type(posenc.apply_rope(q, ids, axial=[20, 20]), NDArray[np.float32])
    assert_type(
        posenc.rope_cos_sin(ids, 128, mrope_section=[16, 24, 24]),
        Tuple[NDArray[Any], NDArray[Any]],
    )
    assert_type(posenc.vision_position_ids([[1, 4, 4]], spatial_merge_size=2), NDArray[np.int64])
    assert_type(posenc.vision_position_ids(24, convention="llama4"), NDArray[np.int64])
    assert_type(posenc.get_num_threads(), int)
    assert_type(posenc.config(), Dict[str, Any])


def foreign_calls(t: Tensor) -> None:
    assert_type(posenc.apply_rope(t), Tensor)
    assert_type(posenc.apply_rope(t, out=t), Tensor)
    assert_type(posenc.sinusoid(t, 8), Tensor)
    assert_type(posenc.rope_cos_sin(t, 8), Tuple[Tensor, Tensor])
    assert_type(posenc.t5_bias(t, 4), Tensor)
    assert_type(posenc.alibi_bias(12, 8, scores=t), Tensor)
    assert_type(posenc.alibi_bias(12, 8, out=t), Tensor)
    assert_type(posenc.fire_bias(t, t, t, t, 1.0, 512.0, 8, scores=t), Tensor)
    assert_type(posenc.relative_position_bucket(t), Tensor)
    assert_type(posenc.permute_rope_weight(t, 4), Tensor)
    assert_type(posenc.apply_rope(t, t, mrope_section=[16, 24, 24]), Tensor)
    assert_type(posenc.rope_cos_sin(t, 8, axial=2), Tuple[Tensor, Tensor])
    assert_type(posenc.vision_position_ids(t), Tensor)
    assert_type(posenc.xl_position_term(t, t), Tensor)


def jax_calls(a: JaxArray, q: NDArray[np.float32]) -> None:
    assert_type(posenc.sinusoid(a, 8), JaxArray)
    assert_type(posenc.rope_cos_sin(a, 8), Tuple[JaxArray, JaxArray])
    assert_type(posenc.relative_position_bucket(a), JaxArray)
    assert_type(posenc.xl_position_term(a, a), JaxArray)
    # a NumPy array is neither: its result is a new NumPy array
    assert_type(posenc.xl_position_term(q, a), NDArray[Any])
    assert_type(posenc.relative_position_bucket(q), NDArray[np.int64])
    assert_type(posenc.positions_from_cu_seqlens(q), NDArray[np.int64])


def probe_calls(E: NDArray[np.float32]) -> None:
    r = probe.report(E)
    assert_type(r, probe.ProbeReport)
    assert_type(r.mae, float)
    assert_type(r.to_markdown(), str)
    assert_type(r._repr_html_(), str)
    assert_type(r.plot(), Figure)
    assert_type(r.plot("probe.png"), str)
    assert_type(r.plot(Path("probe.svg"), dpi=72), Path)
    assert_type(probe.absolute_position_regression(E).fold_mae, NDArray[np.float64])
    assert_type(probe.relative_order_classification(E, pairs=100).error_rate, float)
    assert_type(probe.informativeness(E).rank_for(0.9), int)
    assert_type(probe.cosine_similarity(E), NDArray[np.float64])
    assert_type(probe.load_position_embeddings("model/", key="wpe.weight"), NDArray[Any])


def wrong_calls(q: NDArray[np.float32], E: NDArray[np.float64]) -> None:
    posenc.apply_rope(q, layout="halves")  # type: ignore[call-overload]
    posenc.apply_rope(q, rotary_dim="64")  # type: ignore[call-overload]
    posenc.apply_rope(q, mrope_section=16)  # type: ignore[call-overload]
    posenc.apply_rope(q, axial="2")  # type: ignore[arg-type]
    posenc.vision_position_ids([[1, 2, 2]], convention="vit")  # type: ignore[call-overload]
    posenc.apply_rope(q, xpos="value")  # type: ignore[call-overload]
    posenc.sinusoid(16, "8")  # type: ignore[call-overload]
    posenc.rope_frequencies(128, seq_len=1.5)  # type: ignore[arg-type]
    posenc.alibi_bias(12, 8, scores=q, out=q)  # type: ignore[call-overload]
    posenc.kerple_bias([1.0], [2.0], 8, scores=q, out=q)  # type: ignore[call-overload]
    posenc.set_num_threads("2")  # type: ignore[arg-type]
    probe.report(E, name=3)  # type: ignore[arg-type]
    probe.report(E, seeds=2.5)  # type: ignore[arg-type]
    probe.report(E).plot(3)  # type: ignore[call-overload]
