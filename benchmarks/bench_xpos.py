"""xPos and DeepSeek-V3's interleaved-to-half layout."""

from __future__ import annotations

import numpy as np
from baselines_torch import _deepseek_torch, _xpos_torch_cached, _xpos_torch_lucidrains
from common import Case, _dtype_of, _dtypes, copyto_like

import posenc
from posenc import reference


def _rope_case(shape, name, x, label, kw, torch_fn, note):
    """apply_rope(x, **kw) into out= against the reference and `torch_fn`."""
    out = np.empty_like(x)
    return Case(
        name=f"apply_rope{shape} {name}, {label}, out=",
        nbytes=x.nbytes,
        posenc=lambda: posenc.apply_rope(x, out=out, **kw),
        memory=copyto_like(x),
        numpy=lambda: reference.apply_rope(x, **kw),
        torch=torch_fn,
        note=note,
    )


def xpos_cases(quick):
    seq = 1024 if quick else 4096
    rng = np.random.default_rng(0)
    cases = []
    shape = (1, 32, seq, 128)
    for name in _dtypes():
        x = rng.standard_normal(shape).astype(_dtype_of(name))
        for label, kw, torch_fn, note in [
            (
                "xpos='query'",
                dict(xpos="query", xpos_centre=seq // 2),
                _xpos_torch_cached(x, seq // 2),
                "torch: flash-attn's cached xPos cos/sin (times the scale), "
                "q * cos + rotate_half(q) * sin",
            ),
            (
                "xpos='key', interleaved",
                dict(xpos="key", xpos_centre=seq // 2, layout="interleaved"),
                _xpos_torch_lucidrains(x, seq // 2),
                "torch: rotary-embedding-torch's apply_rotary_emb with use_xpos "
                "(cos and sin of the cached angles taken in the call)",
            ),
        ]:
            cases.append(_rope_case(shape, name, x, label, kw, torch_fn, note))
    return cases


def deepseek_cases(quick):
    seq = 1024 if quick else 4096
    rng = np.random.default_rng(0)
    cases = []
    # a 128-wide head, and DeepSeek-V3's own: 128 heads of a 64-wide rope part
    for shape in ((1, 32, seq, 128), (1, 128, seq, 64)):
        for name in _dtypes():
            x = rng.standard_normal(shape).astype(_dtype_of(name))
            cases.append(
                _rope_case(
                    shape,
                    name,
                    x,
                    "layout='interleaved_to_half'",
                    dict(layout="interleaved_to_half"),
                    _deepseek_torch(x),
                    "torch: transformers' apply_rotary_pos_emb_interleave, cos/sin cached",
                )
            )
    return cases
