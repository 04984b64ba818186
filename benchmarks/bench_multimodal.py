"""M-RoPE of a Qwen2-VL prompt and the 2-D RoPE of its vision tower."""

from __future__ import annotations

import sys

import numpy as np
from baselines_torch import _hf_mrope, _hf_vision
from common import Case, _dtype_of, _dtypes, copyto_like, copyto_of

import posenc
from posenc import reference


def _qwen_prompt(seq):
    """The M-RoPE position ids of a Qwen2-VL prompt of `seq` tokens: a
    little text, one large image (merge 2), text to the end."""
    h, w = 2 * 48, 2 * 64  # 3072 merged patches
    text = seq - h * w // 4
    types = [0] * (text // 4) + [1] * (h * w // 4) + [0] * (text - text // 4)
    ids, _ = posenc.mrope_position_ids(np.asarray([types]), image_grids=[[1, h, w]])
    return ids


def multimodal_cases(quick):
    seq = 4096  # the image takes 3072 of them
    rng = np.random.default_rng(0)
    cases = []
    ids = _qwen_prompt(seq)
    sections = (16, 24, 24)
    dtypes = _dtypes()
    if "bfloat16" not in dtypes:  # pragma: no cover - depends on the machine
        print("multimodal: ml_dtypes is not installed, bfloat16 left out", file=sys.stderr)
    for name in dtypes:
        shape = (1, 32, seq, 128)
        x = rng.standard_normal(shape).astype(_dtype_of(name))
        out = np.empty_like(x)
        cases.append(
            Case(
                name=f"M-RoPE apply_rope{shape} {name}, Qwen2-VL prompt, out=",
                nbytes=x.nbytes,
                posenc=lambda x=x, out=out: posenc.apply_rope(
                    x, ids, mrope_section=sections, out=out
                ),
                memory=copyto_like(x),
                numpy=lambda x=x: reference.apply_rope(x, ids, mrope_section=sections),
                torch=_hf_mrope(x, ids, sections),
                note="torch: transformers' Qwen2-VL apply_rotary_pos_emb, cos/sin cached",
            )
        )
        cases.append(
            Case(
                name=f"plain apply_rope{shape} {name}, positions 0..{seq - 1}, out= (beside it)",
                nbytes=x.nbytes,
                posenc=lambda x=x, out=out: posenc.apply_rope(x, out=out),
                memory=copyto_like(x),
            )
        )
    # Qwen2-VL's vision tower: head_dim 80, 16 heads, a 1344 x 1792 image
    grid = [[1, 96, 128]]
    vids = posenc.vision_position_ids(grid, spatial_merge_size=2)
    x = rng.standard_normal((vids.shape[1], 16, 80)).astype(np.float32)
    out = np.empty_like(x)
    cases.append(
        Case(
            name=f"2-D vision apply_rope{x.shape} float32, axial=2, out=",
            nbytes=x.nbytes,
            posenc=lambda: posenc.apply_rope(x, vids, axial=2, seq_axis=-3, out=out),
            memory=copyto_of(x.shape, x.dtype),
            numpy=lambda: reference.apply_rope(x, vids, axial=2, seq_axis=-3),
            torch=_hf_vision(x, vids),
            note="torch: transformers' apply_rotary_pos_emb_vision, cos/sin cached",
        )
    )
    cases.append(
        Case(
            name=f"plain apply_rope{x.shape} float32, seq_axis=-3, out= (beside it)",
            nbytes=x.nbytes,
            posenc=lambda: posenc.apply_rope(x, seq_axis=-3, out=out),
            memory=copyto_of(x.shape, x.dtype),
        )
    )
    return cases
