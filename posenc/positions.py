"""Position ids: the ids of packed sequences, of multimodal prompts (M-RoPE)
and of vision patches (2-D RoPE).

:func:`positions_from_cu_seqlens`, :func:`mrope_position_ids` and
:func:`vision_position_ids` make the ids :func:`posenc.apply_rope` and
:func:`posenc.rope_cos_sin` take; the rule by which ``apply_rope`` places an
array of positions on ``x.shape[:-1]`` is written out in the RoPE guide
("Where the positions go").
"""

from __future__ import annotations

from numbers import Integral

import numpy as np

from . import _validate as v
from ._interop import accepts_tensors
from ._samplers import pose_position_ids, randomized_position_ids

__all__ = [
    "mrope_position_ids",
    "pose_position_ids",
    "positions_from_cu_seqlens",
    "randomized_position_ids",
    "vision_position_ids",
]


_INT64 = np.iinfo(np.int64)


def _within_int64(arr, name):
    """A ValueError naming `name` when the integers of `arr` do not all fit
    in int64: NumPy holds such ones as uint64, or as Python ints in an
    array of objects, and a cast to int64 would wrap them around."""
    if arr.dtype.kind == "u" and arr.dtype.itemsize == 8 and arr.size and arr.max() > _INT64.max:
        raise ValueError(f"{name} must hold integers within int64, got {int(arr.max())}")
    if arr.dtype.kind == "O" and arr.size:
        items = arr.ravel().tolist()
        if all(isinstance(x, Integral) and not isinstance(x, bool) for x in items):
            raise ValueError(f"{name} must hold integers within int64, got {max(items, key=abs)}")


@accepts_tensors
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
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    ndarray of int64, shape (cu_seqlens[-1],)
        ``start + t - cu_seqlens[k]`` for token ``t`` of sequence ``k``: each
        sequence restarts at `start`, so one ``apply_rope`` call rotates a
        packed batch as if its sequences were apart.

    Raises
    ------
    TypeError, ValueError
        Naming `cu_seqlens` (not integers, not 1-D, not from 0, decreasing) or
        `start` (positions past int64).


    Examples
    --------
    >>> posenc.positions_from_cu_seqlens([0, 3, 5]).tolist()
    [0, 1, 2, 0, 1]
    >>> posenc.positions.positions_from_cu_seqlens([0, 2, 4], start=2).tolist()
    [2, 3, 2, 3]
    """
    cu = np.asarray(cu_seqlens)
    _within_int64(cu, "cu_seqlens")
    if cu.dtype.kind not in "iu":
        raise TypeError(f"cu_seqlens must hold integers, not dtype {cu.dtype}")
    if cu.ndim != 1 or cu.shape[0] < 1:
        raise ValueError(f"cu_seqlens must be 1-dimensional, at least (0,), not {cu.shape}")
    start = v.integer(start, "start")
    cu = cu.astype(np.int64)
    if cu[0] != 0:
        raise ValueError(f"cu_seqlens must start at 0, not {cu[0]}")
    if (cu < 0).any():  # past 0, a decrease (and a difference that could wrap around)
        raise ValueError("cu_seqlens must be non-decreasing")
    lengths = np.diff(cu)
    if (lengths < 0).any():
        raise ValueError("cu_seqlens must be non-decreasing")
    total = int(cu[-1])
    # the result and the starts of the sequences repeated for each token
    v.shape_size((total,), "cu_seqlens[-1]", count=2)
    last = start + max(int(lengths.max()) - 1 if lengths.size else 0, 0)
    if start < _INT64.min or last > _INT64.max:
        raise ValueError(
            f"start = {start}: the positions start .. {last} (the longest sequence's) must fit "
            f"in int64 [{_INT64.min}, {_INT64.max}]"
        )
    # each token's index minus the start of its sequence
    return np.arange(total, dtype=np.int64) - np.repeat(cu[:-1], lengths) + start


def _grids(value, name):
    """(t, h, w) of each image or video, as an (n, 3) int64 array."""
    if value is None:
        return np.zeros((0, 3), dtype=np.int64)
    arr = np.asarray(value)
    _within_int64(arr, name)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers (t, h, w), not dtype {arr.dtype}")
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise ValueError(f"{name} must have shape (n, 3): (t, h, w) of each, not {arr.shape}")
    if (arr < 1).any():
        raise ValueError(f"{name} must hold sizes >= 1")
    return arr.astype(np.int64)


@accepts_tensors
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
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    positions : ndarray of int64, shape (3, batch, seq) (or (3, seq))
    deltas : ndarray of int64, shape (batch, 1) (or (1,))
        ``max(positions) + 1 - n_tokens`` per sequence: where decoding
        resumes (``positions = n_tokens_so_far + delta``).

    Raises
    ------
    TypeError, ValueError
        Naming the argument: token types other than 0, 1, 2, grids that do
        not match the runs of image or video tokens, sizes not multiples of
        `spatial_merge_size`, a mask of another shape.


    Examples
    --------
    >>> ids, delta = posenc.mrope_position_ids([0, 0, 1, 1, 1, 1, 0], image_grids=[[1, 4, 4]])
    >>> ids.tolist()
    [[0, 1, 2, 2, 2, 2, 4], [0, 1, 2, 2, 3, 3, 4], [0, 1, 2, 3, 2, 3, 4]]
    >>> delta.tolist()
    [-2]
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
        if mask.dtype.kind not in "biuf":
            raise TypeError(f"attention_mask must hold 0 and 1, not dtype {mask.dtype}")
        if not np.isin(mask, (0, 1)).all():  # NaN, 0.5 or 2 are not read as 1
            raise ValueError("attention_mask must hold 0 (padding) and 1 (tokens) only")
        mask = np.atleast_2d(mask).astype(bool)
    merge = v.integer(spatial_merge_size, "spatial_merge_size", minimum=1, maximum=2**62)
    images = _grids(image_grids, "image_grids")
    videos = _grids(video_grids, "video_grids")
    frames_apart = v.flag(video_frames_apart, "video_frames_apart")
    intervals = _intervals(video_time_intervals, videos, frames_apart)
    for grids, name in ((images, "image_grids"), (videos, "video_grids")):
        if (grids[:, 1:] % merge).any():
            raise ValueError(f"{name}: h and w must be multiples of spatial_merge_size = {merge}")
    # the runs of each sequence, matched with the grids before anything is made
    runs = [_runs(types[b][mask[b]]) for b in range(types.shape[0])]
    held = {kind: sum(kinds.count(kind) for kinds, _ in runs) for kind in (1, 2)}
    given = {1: len(images), 2: sum(videos[:, 0].tolist()) if frames_apart else len(videos)}
    for kind, what in ((1, "image"), (2, "video")):
        items = f"{what}s" if kind == 1 or not frames_apart else "frames (video_frames_apart)"
        if held[kind] > given[kind]:
            raise ValueError(
                f"token_types has more {items} than {what}_grids gives ({given[kind]})"
            )
        if held[kind] < given[kind]:
            raise ValueError(
                f"{what}_grids gives {given[kind]} {items}, token_types holds {held[kind]}"
            )
    if frames_apart:  # as many frames as runs of video tokens: no more than the tokens
        frames = videos[:, 0]
        videos = np.repeat(videos, frames, axis=0)
        videos[:, 0] = 1
        intervals = np.repeat(intervals, frames)
    queues = {1: (images, intervals[:0], "image"), 2: (videos, intervals, "video")}
    used = {1: 0, 2: 0}
    grid_of = []  # each run's grid (t, h / m, w / m) in Python ints, checked
    for kinds, lengths in runs:
        for kind, length in zip(kinds, lengths):
            if kind == 0:
                continue
            grids, _, what = queues[kind]
            k = used[kind]
            t, h, w = (int(n) for n in grids[k])
            h, w = h // merge, w // merge
            if t * h * w != length:
                raise ValueError(
                    f"{what} {k} has {length} tokens in token_types, but its grid (t, h, w) = "
                    f"{(t, h * merge, w * merge)} with spatial_merge_size {merge} makes {t * h * w}"
                )
            grid_of.append((t, h, w, k))
            used[kind] = k + 1
    positions = np.zeros((3, *types.shape), dtype=np.int64)
    deltas = np.zeros((types.shape[0], 1), dtype=np.int64)
    grid_runs = iter(grid_of)
    for b, (kinds, lengths) in enumerate(runs):
        pieces, current = [], 0
        for kind, length in zip(kinds, lengths):
            if kind == 0:
                pieces.append(np.broadcast_to(np.arange(length) + current, (3, length)))
                current += length
                continue
            t, h, w, k = next(grid_runs)
            step = intervals[k] if kind == 2 else np.float32(1)
            temporal = np.trunc(np.arange(t, dtype=np.float32) * step).astype(np.int64)
            tt, hh, ww = np.meshgrid(temporal, np.arange(h), np.arange(w), indexing="ij")
            pieces.append(np.stack([tt, hh, ww]).reshape(3, -1) + current)
            current += max(h, w)
        seq = np.concatenate(pieces, axis=1) if pieces else np.zeros((3, 0), np.int64)
        positions[:, b, mask[b]] = seq
        deltas[b, 0] = (seq.max() + 1 if seq.size else 0) - sum(lengths)
    if single:
        return positions[:, 0], deltas[0]
    return positions, deltas


def _runs(kept):
    """The runs of equal token types of one sequence: ``(kinds, lengths)``,
    two lists of Python ints."""
    if not kept.size:
        return [], []
    starts = np.concatenate([[0], np.flatnonzero(np.diff(kept)) + 1])
    lengths = np.diff(np.append(starts, kept.shape[0]))
    return kept[starts].astype(np.int64).tolist(), lengths.tolist()


def _intervals(value, videos, frames_apart):
    """The temporal step of each video as float32 (1 when not given): finite
    and >= 0, each making temporal positions within int64."""
    n = len(videos)
    if value is None:
        return np.ones(n, dtype=np.float32)
    arr = v.real_array(value, "video_time_intervals").reshape(-1)
    if arr.shape[0] != n:
        raise ValueError(
            f"video_time_intervals must have one value per video ({n}), not {arr.shape[0]}"
        )
    if not n:
        return np.ones(0, dtype=np.float32)
    if (arr < 0).any():
        raise ValueError(
            "video_time_intervals must be >= 0 (a video's temporal step, e.g. Qwen2.5-VL's "
            f"tokens_per_second * second_per_grid_ts), got {float(arr.min()):g}"
        )
    wide = arr.astype(np.float64)
    if not frames_apart:  # apart, every frame is a grid of t = 1, at its start
        # the last frame's temporal position, (t - 1) * interval, well within int64
        last = (videos[:, 0] - 1).astype(np.float64) * wide
        k = int(np.argmax(last))
        if not last[k] < 2.0**62:
            raise ValueError(
                f"video_time_intervals[{k}] = {wide[k]:g} with the video's t = {videos[k, 0]} "
                f"frames puts its last frame at temporal position {last[k]:g}, past int64"
            )
    if wide.max() > np.finfo(np.float32).max:
        raise ValueError(
            f"video_time_intervals must be within float32's range (they are applied in "
            f"float32, as transformers does), got {float(wide.max()):g}"
        )
    return arr.astype(np.float32)


_VISION_CONVENTIONS = ("qwen2_vl", "llama4")


@accepts_tensors
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
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    ndarray of int64, shape (2, n_patches) (``(2, h * w + 1)`` for Llama 4)
        The two rows of positions ``apply_rope`` and ``rope_cos_sin`` take
        with ``axial=2``: the first half of the pairs rotated by row 0, the
        second by row 1 (Qwen2-VL's ``VisionRotaryEmbedding``, Llama 4's
        ``Llama4VisionRotaryEmbedding``, with ``layout="interleaved"`` for
        Llama 4).

    Raises
    ------
    TypeError, ValueError
        Naming the argument: grids not integers of the convention's shape,
        sizes below 1 or not multiples of `spatial_merge_size`.


    Examples
    --------
    >>> posenc.vision_position_ids([1, 2, 4], spatial_merge_size=2).tolist()
    [[0, 0, 1, 1, 0, 0, 1, 1], [0, 1, 0, 1, 2, 3, 2, 3]]
    >>> posenc.vision_position_ids(2, convention="llama4").tolist()
    [[1, 2, 1, 2, 0], [1, 1, 2, 2, 0]]
    """
    convention = v.choice(convention, "convention", _VISION_CONVENTIONS)
    merge = v.integer(spatial_merge_size, "spatial_merge_size", minimum=1, maximum=2**62)
    arr = np.asarray(grids)
    _within_int64(arr, "grids")
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
        # the result and the patches' indices, each of h * w + 1 patches (their rows and columns)
        v.shape_size((2, h * w + 1), "grids", count=2)
        idx = np.arange(h * w, dtype=np.int64)
        coords = np.stack([idx % w + 1, idx // w + 1])
        return np.concatenate([coords, np.zeros((2, 1), np.int64)], axis=1)
    grid = _grids(arr.reshape(1, 3) if arr.shape == (3,) else arr, "grids")
    if (grid[:, 1:] % merge).any():
        raise ValueError(f"grids: h and w must be multiples of spatial_merge_size = {merge}")
    # the result, and as much again in the pieces it is made of
    v.shape_size((2, sum(t * h * w for t, h, w in grid.tolist())), "grids", count=2)
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
    return np.concatenate(parts, axis=1).astype(np.int64, copy=False)
