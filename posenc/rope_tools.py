"""What users need around a rotary embedding: position ids of packed
sequences, of multimodal prompts (M-RoPE) and of vision patches (2-D RoPE),
checkpoint weights converted between the two RoPE layouts, and Llama 4's
attention temperature on its layers without RoPE."""

from __future__ import annotations

from typing import Any, Literal, Optional, Tuple, overload

import numpy as np

from . import _validate as v
from ._interop import foreign
from ._typing import ArrayLike, ArrayT, NDArray, ScalarT

_LAYOUTS = ("half", "interleaved")


@overload
def positions_from_cu_seqlens(cu_seqlens: np.ndarray, *, start: int = 0) -> NDArray[np.int64]: ...


@overload
def positions_from_cu_seqlens(cu_seqlens: ArrayT, *, start: int = 0) -> ArrayT: ...


@overload
def positions_from_cu_seqlens(cu_seqlens: ArrayLike, *, start: int = 0) -> NDArray[np.int64]: ...


@foreign
def positions_from_cu_seqlens(cu_seqlens, *, start=0):
    """Position ids of packed sequences, from their boundaries.

    Parameters
    ----------
    cu_seqlens : array_like of int, shape (n + 1,)
        The cumulative lengths of `n` sequences packed into one row, as
        flash-attn's varlen functions take them: ``cu_seqlens[0] == 0``,
        non-decreasing, sequence ``k`` holding tokens
        ``cu_seqlens[k]:cu_seqlens[k + 1]``.
    start : int
        The first position of every sequence (0; RoBERTa-like models start
        at ``padding_idx + 1``).

    Returns
    -------
    ndarray of int64, shape (cu_seqlens[-1],)
        ``start + t - cu_seqlens[k]`` for token ``t`` of sequence ``k``: each
        sequence restarts at `start`, so one ``apply_rope`` call rotates a
        packed batch as if its sequences were apart.
    """
    cu = np.asarray(cu_seqlens)
    if cu.dtype.kind not in "iu":
        raise TypeError(f"cu_seqlens must hold integers, not dtype {cu.dtype}")
    if cu.ndim != 1 or cu.shape[0] < 1:
        raise ValueError(f"cu_seqlens must be 1-dimensional, at least (0,), not {cu.shape}")
    start = v.integer(start, "start")
    cu = cu.astype(np.int64)
    if cu[0] != 0:
        raise ValueError(f"cu_seqlens must start at 0, not {cu[0]}")
    lengths = np.diff(cu)
    if (lengths < 0).any():
        raise ValueError("cu_seqlens must be non-decreasing")
    total = int(cu[-1])
    v.shape_size((total,), "cu_seqlens[-1]")
    # each token's index minus the start of its sequence
    return np.arange(total, dtype=np.int64) - np.repeat(cu[:-1], lengths) + start


@overload
def permute_rope_weight(
    weight: NDArray[ScalarT],
    n_heads: int,
    *,
    to: Literal["half", "interleaved"] = "half",
) -> NDArray[ScalarT]: ...


@overload
def permute_rope_weight(
    weight: ArrayT,
    n_heads: int,
    *,
    to: Literal["half", "interleaved"] = "half",
) -> ArrayT: ...


@overload
def permute_rope_weight(
    weight: ArrayLike,
    n_heads: int,
    *,
    to: Literal["half", "interleaved"] = "half",
) -> NDArray[Any]: ...


@foreign
def permute_rope_weight(weight, n_heads, *, to="half"):
    """A q or k projection converted between the interleaved and half layouts.

    A checkpoint trained with interleaved RoPE pairs (Meta's Llama, GPT-J)
    works with the half layout (transformers' Llama) once the output
    features of each head are reordered so that pair ``(2i, 2i + 1)``
    becomes ``(i, i + head_dim / 2)``; transformers converts Meta's
    checkpoints this way.  The attention scores are unchanged: q and k are
    permuted alike, and the rotation of each pair is the same.

    Parameters
    ----------
    weight : array_like, shape (n_heads * head_dim, ...) or (n_heads * head_dim,)
        The projection's weight (output features first, as torch's Linear
        stores them) or its bias.
    n_heads : int
        Number of heads the output features split into (the key/value heads
        for a k projection with grouped queries).
    to : {"half", "interleaved"}
        The layout to convert to; the other is the one `weight` is in.

    Returns
    -------
    ndarray (a new array) of weight's shape and dtype.
    """
    w = np.asarray(weight)
    if w.ndim not in (1, 2):
        raise ValueError(f"weight must be 1- or 2-dimensional, not {w.ndim}-dimensional")
    n_heads = v.integer(n_heads, "n_heads", minimum=1)
    to = v.choice(to, "to", _LAYOUTS)
    rows = w.shape[0]
    if rows % (2 * n_heads):
        raise ValueError(
            f"weight.shape[0] = {rows} must be n_heads = {n_heads} times an even head_dim"
        )
    half = rows // n_heads // 2
    # interleaved -> half: feature 2i + j of a head goes to j * half + i
    split = (half, 2) if to == "half" else (2, half)
    heads = w.reshape(n_heads, *split, *w.shape[1:])
    return np.ascontiguousarray(np.swapaxes(heads, 1, 2)).reshape(w.shape)


@overload
def attention_temperature(
    positions: np.ndarray,
    *,
    floor_scale: float = 8192,
    attn_scale: float = 0.1,
) -> NDArray[np.float64]: ...


@overload
def attention_temperature(
    positions: ArrayT,
    *,
    floor_scale: float = 8192,
    attn_scale: float = 0.1,
) -> ArrayT: ...


@overload
def attention_temperature(
    positions: ArrayLike,
    *,
    floor_scale: float = 8192,
    attn_scale: float = 0.1,
) -> NDArray[np.float64]: ...


@foreign
def attention_temperature(positions, *, floor_scale=8192, attn_scale=0.1):
    """Llama 4's query scale on its layers without RoPE (attention
    temperature tuning): ``1 + attn_scale * log(1 + floor((pos + 1) /
    floor_scale))``, which grows with the distance from the start.

    Parameters
    ----------
    positions : int or array_like
        Positions (an int n means ``arange(n)``).
    floor_scale, attn_scale
        The config's ``floor_scale`` (8192) and ``attn_scale`` (0.1).

    Returns
    -------
    ndarray of float64, the shape of `positions`
        The factor to multiply the queries by, computed in float64 (the
        model computes it in float32).
    """
    pos, shape = v.positions(positions)
    floor_scale = v.real(floor_scale, "floor_scale", positive=True)
    attn_scale = v.real(attn_scale, "attn_scale")
    scale = np.log1p(np.floor((pos + 1.0) / floor_scale)) * attn_scale + 1.0
    return scale.reshape(shape)


def _grids(value, name):
    if value is None:
        return np.zeros((0, 3), dtype=np.int64)
    arr = np.asarray(value)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers (t, h, w), not dtype {arr.dtype}")
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise ValueError(f"{name} must have shape (n, 3): (t, h, w) of each, not {arr.shape}")
    if (arr < 1).any():
        raise ValueError(f"{name} must hold sizes >= 1")
    return arr.astype(np.int64)


@overload
def mrope_position_ids(
    token_types: np.ndarray,
    *,
    image_grids: Optional[ArrayLike] = None,
    video_grids: Optional[ArrayLike] = None,
    spatial_merge_size: int = 2,
    video_time_intervals: Optional[ArrayLike] = None,
    video_frames_apart: bool = False,
    attention_mask: Optional[ArrayLike] = None,
) -> Tuple[NDArray[np.int64], NDArray[np.int64]]: ...


@overload
def mrope_position_ids(
    token_types: ArrayT,
    *,
    image_grids: Optional[ArrayLike] = None,
    video_grids: Optional[ArrayLike] = None,
    spatial_merge_size: int = 2,
    video_time_intervals: Optional[ArrayLike] = None,
    video_frames_apart: bool = False,
    attention_mask: Optional[ArrayLike] = None,
) -> Tuple[ArrayT, ArrayT]: ...


@overload
def mrope_position_ids(
    token_types: ArrayLike,
    *,
    image_grids: Optional[ArrayLike] = None,
    video_grids: Optional[ArrayLike] = None,
    spatial_merge_size: int = 2,
    video_time_intervals: Optional[ArrayLike] = None,
    video_frames_apart: bool = False,
    attention_mask: Optional[ArrayLike] = None,
) -> Tuple[NDArray[np.int64], NDArray[np.int64]]: ...


@foreign
def mrope_position_ids(
    token_types,
    *,
    image_grids=None,
    video_grids=None,
    spatial_merge_size=2,
    video_time_intervals=None,
    video_frames_apart=False,
    attention_mask=None,
):
    """The (temporal, height, width) position ids of a Qwen-VL prompt (M-RoPE).

    Text tokens count up by one on all three rows.  The tokens of an image
    or a video, a grid of ``t x (h / m) x (w / m)`` merged patches (``m`` the
    spatial merge size), take ``start + frame * interval``, ``start + row``
    and ``start + column``, and the text after them resumes at ``start +
    max(h, w) / m``: the rule of transformers' Qwen2-VL ``get_rope_index``.

    Parameters
    ----------
    token_types : array_like of int, shape (batch, seq) or (seq,)
        0 for text, 1 for image, 2 for video tokens (transformers'
        ``mm_token_type_ids``).  Each run of consecutive image (video) tokens
        is one image (video), and must hold exactly its grid's number of
        tokens: a prompt that does not add up raises ValueError.
    image_grids, video_grids : array_like of int, shape (n, 3), optional
        ``(t, h, w)`` of each image / video in patches, in order of
        appearance over the batch (``image_grid_thw``, ``video_grid_thw``).
    spatial_merge_size : int
        The vision tower's ``spatial_merge_size`` (2 in Qwen2-VL to Qwen3-VL).
    video_time_intervals : array_like of float, shape (n_videos,), optional
        The temporal step of each video: 1 (Qwen2-VL, the default), or
        Qwen2.5-VL's ``tokens_per_second * second_per_grid_ts``; the
        temporal index is ``trunc(frame * interval)`` in float32, as there.
    video_frames_apart : bool
        Qwen3-VL: every frame of a video is its own grid of ``t = 1`` (the
        frames are separated by timestamp text).
    attention_mask : array_like of 0/1, shape of token_types, optional
        Padding (0) is skipped and gets position 0 on all rows.

    Returns
    -------
    positions : ndarray of int64, shape (3, batch, seq) (or (3, seq))
    deltas : ndarray of int64, shape (batch, 1) (or (1,))
        ``max(positions) + 1 - n_tokens`` per sequence: where decoding
        resumes (``positions = n_tokens_so_far + delta``).
    """
    types = np.asarray(token_types)
    if types.dtype.kind not in "iub":
        raise TypeError(f"token_types must hold integers 0, 1, 2, not dtype {types.dtype}")
    single = types.ndim == 1
    types = np.atleast_2d(types)
    if types.ndim != 2:
        raise ValueError(f"token_types must have shape (batch, seq) or (seq,), not {types.shape}")
    if not np.isin(types, (0, 1, 2)).all():
        raise ValueError("token_types must hold 0 (text), 1 (image) or 2 (video) only")
    mask = np.ones(types.shape, dtype=bool)
    if attention_mask is not None:
        mask = np.asarray(attention_mask)
        if mask.shape != np.asarray(token_types).shape:
            raise ValueError(
                f"attention_mask must have token_types' shape {np.asarray(token_types).shape}, "
                f"not {mask.shape}"
            )
        mask = np.atleast_2d(mask).astype(bool)
    merge = v.integer(spatial_merge_size, "spatial_merge_size", minimum=1)
    images = _grids(image_grids, "image_grids")
    videos = _grids(video_grids, "video_grids")
    if video_time_intervals is None:
        intervals = np.ones(len(videos), dtype=np.float32)
    else:
        intervals = np.asarray(video_time_intervals, dtype=np.float32).reshape(-1)
        if intervals.shape[0] != len(videos):
            raise ValueError(
                f"video_time_intervals must have one value per video ({len(videos)}), "
                f"not {intervals.shape[0]}"
            )
    if v.flag(video_frames_apart, "video_frames_apart"):
        frames = videos[:, 0]
        videos = np.repeat(videos, frames, axis=0)
        videos[:, 0] = 1
        intervals = np.repeat(intervals, frames)
    for grids, name in ((images, "image_grids"), (videos, "video_grids")):
        if (grids[:, 1:] % merge).any():
            raise ValueError(f"{name}: h and w must be multiples of spatial_merge_size = {merge}")
    queues = {1: (images, intervals[:0], "image"), 2: (videos, intervals, "video")}
    used = {1: 0, 2: 0}
    positions = np.zeros((3, *types.shape), dtype=np.int64)
    deltas = np.zeros((types.shape[0], 1), dtype=np.int64)
    for b in range(types.shape[0]):
        kept = types[b][mask[b]]
        pieces, current = [], 0
        edges = np.flatnonzero(np.diff(kept)) + 1
        for run in np.split(kept, edges) if kept.size else []:
            kind, length = int(run[0]), run.shape[0]
            if kind == 0:
                pieces.append(np.broadcast_to(np.arange(length) + current, (3, length)))
                current += length
                continue
            grids, steps, what = queues[kind]
            k = used[kind]
            if k >= len(grids):
                raise ValueError(f"token_types has more {what}s than {what}_grids gives ({k})")
            t, h, w = grids[k]
            h, w = h // merge, w // merge
            if t * h * w != length:
                raise ValueError(
                    f"{what} {k} has {length} tokens in token_types, but its grid (t, h, w) = "
                    f"{tuple(grids[k])} with spatial_merge_size {merge} makes {t * h * w}"
                )
            step = steps[k] if kind == 2 else np.float32(1)
            temporal = np.trunc(np.arange(t, dtype=np.float32) * step).astype(np.int64)
            tt, hh, ww = np.meshgrid(temporal, np.arange(h), np.arange(w), indexing="ij")
            pieces.append(np.stack([tt, hh, ww]).reshape(3, -1) + current)
            current += max(h, w)
            used[kind] = k + 1
        seq = np.concatenate(pieces, axis=1) if pieces else np.zeros((3, 0), np.int64)
        positions[:, b, mask[b]] = seq
        deltas[b, 0] = (seq.max() + 1 if seq.size else 0) - kept.shape[0]
    for kind, (grids, _, what) in queues.items():
        if used[kind] != len(grids):
            raise ValueError(
                f"{what}_grids gives {len(grids)} {what}s, token_types holds {used[kind]}"
            )
    if single:
        return positions[:, 0], deltas[0]
    return positions, deltas


_VISION_CONVENTIONS = ("qwen2_vl", "llama4")


@overload
def vision_position_ids(
    grids: np.ndarray,
    *,
    spatial_merge_size: int = 1,
    convention: Literal["qwen2_vl", "llama4"] = "qwen2_vl",
) -> NDArray[np.int64]: ...


@overload
def vision_position_ids(
    grids: ArrayT,
    *,
    spatial_merge_size: int = 1,
    convention: Literal["qwen2_vl", "llama4"] = "qwen2_vl",
) -> ArrayT: ...


@overload
def vision_position_ids(
    grids: ArrayLike,
    *,
    spatial_merge_size: int = 1,
    convention: Literal["qwen2_vl", "llama4"] = "qwen2_vl",
) -> NDArray[np.int64]: ...


@foreign
def vision_position_ids(grids, *, spatial_merge_size=1, convention="qwen2_vl"):
    """The (row, column) coordinates of a vision tower's patches, for 2-D
    (axial) RoPE: ``apply_rope(q, vision_position_ids(...), axial=2)``.

    Parameters
    ----------
    grids : array_like of int
        ``convention="qwen2_vl"``: shape ``(n, 3)`` (or ``(3,)`` for one),
        the ``(t, h, w)`` of each image or video in patches (transformers'
        ``grid_thw``).
        ``convention="llama4"``: the ``(h, w)`` of one image in patches, or
        one int for a square image (``image_size // patch_size``).
    spatial_merge_size : int
        Qwen2-VL to Qwen3-VL: the side of the blocks of patches the tower
        merges (its config's ``spatial_merge_size``, 2 there); ``h`` and
        ``w`` must be multiples of it.  Llama 4: 1.
    convention : {"qwen2_vl", "llama4"}
        ``"qwen2_vl"`` (Qwen2-VL, Qwen2.5-VL, Qwen3-VL vision towers): the
        patches of each image in the order the tower holds them, block by
        block of ``m x m`` patches (row-major within a block and among
        blocks), every frame of a video again; row 0 the patch's row, row 1
        its column, from 0 (Qwen2.5-VL's tower then reorders its patches
        for window attention: reorder these columns the same way).
        ``"llama4"`` (Llama 4's vision encoder): the patches row-major, then
        the class token; row 0 the patch's column + 1, row 1 its row + 1,
        and ``(0, 0)`` for the class token, which is therefore not rotated
        (Llama 4 zeroes its angles).

    Returns
    -------
    ndarray of int64, shape (2, n_patches) (``(2, h * w + 1)`` for Llama 4)
        The two rows of positions ``apply_rope`` and ``rope_cos_sin`` take
        with ``axial=2``: the first half of the pairs rotated by row 0, the
        second by row 1 (Qwen2-VL's ``VisionRotaryEmbedding``, Llama 4's
        ``Llama4VisionRotaryEmbedding``, with ``layout="interleaved"`` for
        Llama 4).
    """
    convention = v.choice(convention, "convention", _VISION_CONVENTIONS)
    merge = v.integer(spatial_merge_size, "spatial_merge_size", minimum=1)
    arr = np.asarray(grids)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"grids must hold integers, not dtype {arr.dtype}")
    if convention == "llama4":
        if merge != 1:
            raise ValueError("spatial_merge_size must be 1 with convention='llama4'")
        if arr.ndim == 0:
            arr = np.stack([arr, arr])
        if arr.shape != (2,):
            raise ValueError(
                f"grids must be (h, w) or one int with convention='llama4', not shape {arr.shape}"
            )
        if (arr < 1).any():
            raise ValueError("grids must hold sizes >= 1")
        h, w = (int(n) for n in arr)
        idx = np.arange(h * w, dtype=np.int64)
        coords = np.stack([idx % w + 1, idx // w + 1])
        return np.concatenate([coords, np.zeros((2, 1), np.int64)], axis=1)
    grid = _grids(arr.reshape(1, 3) if arr.shape == (3,) else arr, "grids")
    if (grid[:, 1:] % merge).any():
        raise ValueError(f"grids: h and w must be multiples of spatial_merge_size = {merge}")
    parts = []
    for t, h, w in grid.tolist():
        rows, cols = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
        # (h/m, m, w/m, m) -> blocks row-major, patches row-major within each
        order = (h // merge, merge, w // merge, merge)
        rows = rows.reshape(order).transpose(0, 2, 1, 3).reshape(-1)
        cols = cols.reshape(order).transpose(0, 2, 1, 3).reshape(-1)
        parts.append(np.tile(np.stack([rows, cols]), (1, t)))
    if not parts:
        return np.zeros((2, 0), np.int64)
    return np.concatenate(parts, axis=1).astype(np.int64)
