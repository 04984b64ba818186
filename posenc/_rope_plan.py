"""The RoPE channel plan and frequencies: how a call's options read.

What posenc.rope's functions and the JAX adapter (posenc._jax, which
decides from them how to batch a call under vmap) share: the rotary
dimension, base and configuration of apply_rope (:func:`resolve_rotary`),
positions in rows for M-RoPE's sections and axial RoPE
(:func:`channel_plan`, a :class:`Channels` or None) and the frequencies
each channel takes, and the sequence length of the families that depend
on one (:func:`sequence_length`).  The families themselves are
posenc.rope_scaling's.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from . import _core, rope_scaling
from . import _validate as v


def sequence_length(pos, rope):
    """transformers' sequence length for the length-dependent families:
    ``max(position_ids) + 1``."""
    if not rope.family.needs_seq_len or pos.size == 0:
        return None
    return int(math.floor(float(pos.max()))) + 1


class Channels:
    """Positions in channels: `n` rows of positions, pair i of the rotary
    part rotated by row ``channel[i]`` (int32), the frequencies those of the
    rotary dimension (M-RoPE) or a ladder of their own per channel
    (`ladders`: axial RoPE, each channel's pairs as a rotary part of twice
    their number)."""

    __slots__ = ("n", "channel", "ladders", "what", "example")

    def __init__(self, n, channel, ladders, what, example):
        self.n = n
        self.channel = channel
        self.ladders = ladders
        self.what = what
        self.example = example

    def frequencies(self, rotary, base, rope, seq_len):
        if self.ladders is None:
            return rope_scaling.frequencies(rotary, base, rope, seq_len)
        plain = rope_scaling.read(None)
        parts = [rope_scaling.frequencies(2 * s, base, plain, None)[0] for s in self.ladders]
        return np.ascontiguousarray(np.concatenate(parts), dtype=np.float64), 1.0


@lru_cache(maxsize=64)
def _mrope_channels(sections, interleaved, half):
    """The channel of each of `half` pairs for M-RoPE's sections: runs of
    ``sections[c]`` pairs in turn (Qwen2-VL, Qwen2.5-VL), or interleaved
    (Qwen3-VL): channel ``c >= 1`` on pairs ``c, c + n, c + 2n, ...``
    (``sections[c]`` of them, n the number of channels), channel 0 on the
    rest; a ValueError unless they add up to `half`."""
    n = len(sections)
    if sum(sections) != half:
        raise ValueError(
            f"mrope_section {list(sections)} must add up to rotary_dim // 2 = {half} pairs, "
            f"not {sum(sections)}"
        )
    if not interleaved:
        channel = np.repeat(np.arange(n, dtype=np.int32), sections)
    else:
        channel = np.zeros(half, dtype=np.int32)
        for c in range(1, n):
            if sections[c] and c + n * (sections[c] - 1) >= half:
                raise ValueError(
                    f"interleaved mrope_section {list(sections)}: channel {c} takes pairs "
                    f"{c}, {c + n}, ... {c + n * (sections[c] - 1)}, past the {half} pairs"
                )
            channel[c : c + n * sections[c] : n] = c
    channel.setflags(write=False)  # shared by the calls with these sections
    return channel


_AXIAL_ONLY = ("default", "axial")


def channel_plan(rotary, base, rope, mrope_section, mrope_interleaved, axial):
    """A :class:`Channels` for M-RoPE or axial RoPE, or None for one
    position per row."""
    interleaved = rope_scaling.flag(mrope_interleaved, "mrope_interleaved")
    from_config = rope_scaling.sections(rope)
    if mrope_section is not None:
        sections = rope_scaling.section_list(mrope_section, "mrope_section")
        if from_config is not None and from_config[0] != sections:
            raise ValueError(
                f"mrope_section = {list(sections)} disagrees with scaling's mrope_section "
                f"{list(from_config[0])}"
            )
        # the sections are the caller's, their layout the config's where it says one
        layout = from_config[1] if from_config is not None else rope_scaling.mrope_layout(rope)
        if layout is None and rope.whole_config and mrope_interleaved is None:
            raise ValueError(
                f"mrope_section with a config of model type {rope.model_type!r}: posenc does not "
                "know how its rotary code shares the pairs among the rows; pass "
                "mrope_interleaved= (False: Qwen2-VL's runs, True: Qwen3-VL's interleaving)"
            )
        if layout is not None and mrope_interleaved is None:
            interleaved = layout
        elif layout is not None and interleaved != layout:
            raise ValueError(
                f"mrope_interleaved = {interleaved} disagrees with scaling, whose M-RoPE "
                f"{'interleaves' if layout else 'does not interleave'} the sections "
                f"(mrope_interleaved {layout})"
            )
    elif from_config is not None:
        sections = from_config[0]
        if mrope_interleaved is not None and interleaved != from_config[1]:
            raise ValueError(
                f"mrope_interleaved = {interleaved} disagrees with scaling's mrope_interleaved "
                f"{from_config[1]}"
            )
        interleaved = from_config[1]
    else:
        sections = None
        if interleaved:
            raise ValueError("mrope_interleaved=True needs mrope_section= (the pairs of each row)")
    if sections is not None and rope.model_mrope_layout is not None and len(sections) != 3:
        raise ValueError(
            f"mrope_section {list(sections)}: the rotary code of {rope.model_type!r} reads 3 "
            f"rows of positions (and 3 sections), not {len(sections)}"
        )
    half = rotary // 2
    if sections is not None:
        if axial is not None or rope.family.rows:
            raise ValueError("axial RoPE and M-RoPE's mrope_section cannot be combined")
        if len(sections) > _core.ROPE_MAX_CHANNELS:
            raise ValueError(
                f"mrope_section must have at most {_core.ROPE_MAX_CHANNELS} sections, got "
                f"{len(sections)}"
            )
        channel = _mrope_channels(sections, bool(interleaved), half)
        what = f"M-RoPE's mrope_section {list(sections)}"
        rows = len(sections)
        return Channels(rows, channel, None, what, f"transformers' ({rows}, batch, seq)")
    if axial is None:
        if not rope.family.rows:
            return None
        axial = rope.family.rows  # a vision tower's config: rows and columns
    if isinstance(axial, (bool, np.bool_)):
        raise TypeError("axial must be an int (the number of axes) or a list of pair counts")
    if isinstance(axial, (int, np.integer)):
        n = v.integer(axial, "axial", minimum=1, maximum=_core.ROPE_MAX_CHANNELS)
        if half % n:
            raise ValueError(
                f"axial = {n} axes cannot share rotary_dim // 2 = {half} pairs equally; pass "
                "the pairs of each axis as a list"
            )
        sections = (half // n,) * n
    else:
        sections = rope_scaling.section_list(axial, "axial")
        if 0 in sections:
            raise ValueError(f"axial {list(sections)}: every axis needs at least one pair")
        if len(sections) > _core.ROPE_MAX_CHANNELS:
            raise ValueError(
                f"axial must have at most {_core.ROPE_MAX_CHANNELS} axes, got {len(sections)}"
            )
        if sum(sections) != half:
            raise ValueError(
                f"axial {list(sections)} must add up to rotary_dim // 2 = {half} pairs, not "
                f"{sum(sections)}"
            )
    if rope.family.name not in _AXIAL_ONLY:
        raise ValueError(
            f"axial RoPE takes the plain frequencies of each axis; scaling's rope_type "
            f"{rope.family.name!r} is not defined for it"
        )
    channel = np.repeat(np.arange(len(sections), dtype=np.int32), sections)
    n = len(sections)
    return Channels(n, channel, sections, f"axial {list(sections)}", f"({n}, n_patches)")


def resolve_rotary(dim, rotary_dim, base, scaling, layer_type, name="x.shape[-1]"):
    """The rotary dimension r of apply_rope, its base and configuration
    (`name`: what the head dimension `dim` is in the caller's words)."""
    rope = rope_scaling.read(scaling, layer_type)
    rope_scaling.check_head_dim(dim, rope, name)
    has_factor = rope.params.get("partial_rotary_factor") is not None
    if rotary_dim is None:
        if not has_factor and (dim <= 0 or dim % 2):
            raise ValueError(
                f"rotary_dim defaults to {name} = {dim}, which must be a positive even "
                "number; pass an even rotary_dim to rotate only part of it"
            )
        rotary = rope_scaling.rotary_dimension(dim, rope)
    else:
        rotary = v.even_dim(rotary_dim, "rotary_dim")
        if rotary > dim:
            raise ValueError(f"rotary_dim must be <= {name} = {dim}, got {rotary}")
        if has_factor and rope_scaling.rotary_dimension(dim, rope) != rotary:
            raise ValueError(
                f"rotary_dim = {rotary} disagrees with scaling's partial_rotary_factor = "
                f"{rope.params['partial_rotary_factor']} for {name} = {dim}"
            )
    v.shape_size((rotary // 2,), f"{name} (its rotary_dim // 2 frequencies)")
    return rotary, rope_scaling.base_of(base, rope), rope
