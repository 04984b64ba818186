"""Every rotary embedding class of the installed transformers against posenc.

For each ``*RotaryEmbedding`` class of ``transformers.models`` that a config
builds, with the default config of its model (the text sub-config of a
composite one, every layer type of per-layer parameters): the module's own
cos and sin for 64 positions (three different rows for M-RoPE's sections,
an 8 x 8 grid of patches for a vision tower's ``"axial"``), against
``posenc.rope_cos_sin(positions, head_dim, scaling=config)`` for each head
dimension the config can mean.  posenc must either give the module's numbers
(within the module's float32 rounding; where it refuses the half layout,
in the layout it names) or refuse with TypeError or ValueError: a config it
reads otherwise than the model is the bug this file is here to catch.
Classes whose default config does not build or run, and those not driven by
a config and position ids, are counted, not checked.

The same for the rotation: ``posenc.apply_rope(x, positions, scaling=config)``
against the modeling file's own ``apply_rotary_pos_emb`` on the module's cos
and sin (``apply_rotary_pos_emb_interleave`` where the model's attention
calls it, ``apply_rotary_emb`` on DeepSeek-V2's and Llama 4's complex
tables; a model whose code turns interleaved pairs, or its pairs by minus
the angle, is refused with the half layout; the layout the error names must
then be the model's).
"""

import inspect
import warnings

import numpy as np
import pytest
from rotary_classes import default_configs, rotary_classes

import posenc

POSITIONS = 64


@pytest.fixture(scope="module")
def hf(torch, transformers):
    transformers.logging.set_verbosity_error()
    return transformers


def _layer_types(config):
    """The layer types of per-layer parameters (Gemma 3's), as posenc's
    modules list them: which of the config's readings the checks compare."""
    from posenc.torch import _layer_types  # torch is there: the tests ask for it

    return _layer_types(config)


def _params(config, layer_type):
    params = getattr(config, "rope_parameters", None) or {}
    return (params.get(layer_type) or {}) if layer_type is not None else params


def _positions(params):
    """(the module's position ids, posenc's positions) for these parameters."""
    ids = np.arange(POSITIONS)[None]
    if params.get("mrope_section") is not None:
        rows = np.stack([ids, ids // 4, ids % 7])
        return rows, rows
    if params.get("rope_type") == "axial":  # patches (row, column): the module's (n, 2)
        grid = np.stack(np.meshgrid(np.arange(8), np.arange(8), indexing="ij"), -1).reshape(-1, 2)
        return grid, np.ascontiguousarray(grid.T)
    return ids, ids


def _layer_config(config, layer_type):
    """The config transformers builds the first layer of `layer_type` with:
    its own per-layer config where the config is heterogeneous (Gemma 4's
    full-attention layers have their own head_dim), else the config."""
    if layer_type is None or not getattr(config, "is_heterogeneous", False):
        return config
    return config.per_layer_config[list(config.layer_types).index(layer_type)]


def _head_dims(config, layer_type):
    """The head dimensions a user of this config may pass."""
    config = _layer_config(config, layer_type)
    dims = []

    def value(key):
        try:
            return getattr(config, key, None)
        except Exception:
            return None

    if isinstance(value("head_dim"), int):
        dims.append(value("head_dim"))
    heads = value("num_attention_heads") or value("num_heads")
    for width in ("hidden_size", "embed_dim"):
        if isinstance(value(width), int) and isinstance(heads, int) and heads:
            dims.append(value(width) // heads)
    dims += [value(k) for k in ("qk_rope_head_dim", "rotary_dim") if isinstance(value(k), int)]
    return [d for d in dict.fromkeys(dims) if d > 0]


def _summary(outcomes):
    """One outcome for several: the first mismatch, else 'match' if any
    matched, else 'refused' (None for none)."""
    if not outcomes:
        return None
    bad = [o for o in outcomes if o not in ("match", "refused")]
    return bad[0] if bad else ("match" if "match" in outcomes else "refused")


def _run_module(torch, rotary, ids, layer_type):
    """The rotary module's output for position ids `ids`."""
    kwargs = {} if layer_type is None else {"layer_type": layer_type}
    with torch.no_grad():  # Mistral Large 4's tables are made from parameters
        return rotary(torch.zeros(1), torch.from_numpy(ids), **kwargs)


def _module_tables(torch, rotary, ids, layer_type):
    out = _run_module(torch, rotary, ids, layer_type)
    if torch.is_tensor(out) and out.is_complex():
        return out.real.double().numpy(), out.imag.double().numpy()
    return out[0].double().numpy(), out[1].double().numpy()


def _check(config, rotary, layer_type, torch):
    """'match', 'refused' or a description of a silent mismatch, for one
    config and layer type (None: the module did not run on these positions)."""
    params = _params(config, layer_type)
    module_ids, ids = _positions(params)
    try:
        cos, sin = _module_tables(torch, rotary, module_ids, layer_type)
    except Exception:
        return None
    outcomes = []
    prefix = "" if layer_type is None else f"{layer_type}_"
    inv_freq = getattr(rotary, f"{prefix}inv_freq", getattr(rotary, "inv_freq", None))
    # flash-attn style modules give (seq, rotary_dim / 2) tables, one per frequency
    half_tables = inv_freq is not None and cos.shape[-1] == inv_freq.numel()
    full = not half_tables or params.get("rope_type") == "axial"
    for dim in _head_dims(config, layer_type):
        kwargs = {} if layer_type is None else {"layer_type": layer_type}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # unknown keys are warned about, and read
                try:
                    c, s = posenc.rope_cos_sin(ids, dim, scaling=config, dtype="float64",
                                               full=full, **kwargs)  # fmt: skip
                except ValueError as exc:
                    if "pass layout='interleaved'" not in str(exc):
                        raise
                    # the layout the error names must be the module's
                    c, s = posenc.rope_cos_sin(ids, dim, scaling=config, dtype="float64",
                                               full=full, layout="interleaved",
                                               **kwargs)  # fmt: skip
        except (TypeError, ValueError):
            outcomes.append("refused")
            continue
        if c.shape != cos.shape:
            outcomes.append(f"dim {dim}: tables {c.shape}, the module's {cos.shape}")
            continue
        # the module's float32 phases below 64 and its float32 values
        err = max(np.abs(c - cos).max(), np.abs(s - sin).max())
        outcomes.append("match" if err < 1e-4 else f"dim {dim}: cos/sin off by {err:.3g}")
    return _summary(outcomes)


def _tables_check(config, rotary, module, torch):
    """_check for every layer type of the config."""
    results = [_check(config, rotary, lt, torch) for lt in _layer_types(config)]
    return _summary([r for r in results if r is not None])


def _sweep(transformers, torch, check):
    """check(config, rotary, module, torch) for every config-driven rotary
    class, with the first of its configs the check runs on: a tally of the
    outcomes, and the silent mismatches."""
    tally, silent = {}, []
    for module, cls in rotary_classes(transformers):
        init = inspect.signature(cls.__init__).parameters
        forward = inspect.signature(cls.forward).parameters
        if "config" not in init or "position_ids" not in forward:
            tally["not config-driven"] = tally.get("not config-driven", 0) + 1
            continue
        outcome = None
        for config in default_configs(transformers, module, cls):
            try:
                rotary = cls(config)
            except Exception:
                continue
            outcome = check(config, rotary, module, torch)
            if outcome is not None:
                break
        if outcome is None:
            outcome = "not set up"
        elif outcome not in ("match", "refused"):
            silent.append(f"{cls.__name__} ({type(config).__name__}): {outcome}")
            outcome = "silent mismatch"
        tally[outcome] = tally.get(outcome, 0) + 1
    return tally, silent


def test_every_rotary_module_is_read_exactly_or_refused(hf, torch):
    tally, silent = _sweep(hf, torch, _tables_check)
    assert not silent, "\n".join(silent)
    # the sweep ran: most of transformers' rotary classes were compared and matched
    assert tally.get("match", 0) >= 150, tally


def _apply_check(config, rotary, module, torch):
    """'match', 'refused' or a mismatch, for apply_rope(x, positions,
    scaling=config) against the module's own apply_rotary_pos_emb (its
    _interleave variant under DeepSeek-V3's rope_interleave) on the rotary
    module's cos and sin, for every layer type; None where the module's
    function does not run."""
    if not hasattr(module, "apply_rotary_pos_emb") and not _interleaving(module, rotary):
        if not hasattr(module, "apply_rotary_emb"):
            return None
    results = [_apply_layer(config, rotary, module, torch, lt) for lt in _layer_types(config)]
    return _summary([r for r in results if r is not None])


def _interleaving(module, rotary):
    """Whether the attention of this rotary module's model (the classes of
    the modeling file named like it, ending in Attention or MLA) turns its pairs with
    apply_rotary_pos_emb_interleave, with no rope_interleave flag to read."""
    if not hasattr(module, "apply_rotary_pos_emb_interleave"):
        return False
    prefix = type(rotary).__name__[: -len("RotaryEmbedding")]
    for name, cls in vars(module).items():
        if inspect.isclass(cls) and name.startswith(prefix) and name.endswith(("Attention", "MLA")):
            source = inspect.getsource(cls)
            if "apply_rotary_pos_emb_interleave(" in source and "rope_interleave" not in source:
                return True
    return False


def _apply_layer(config, rotary, module, torch, layer_type):
    params = _params(config, layer_type)
    if params.get("rope_type") == "axial":
        return None  # the towers rotate with functions of their own
    module_ids, ids = _positions(params)
    kwargs = {} if layer_type is None else {"layer_type": layer_type}
    try:
        tables = _run_module(torch, rotary, module_ids, layer_type)
    except Exception:
        return None
    if torch.is_tensor(tables) and tables.is_complex():
        # DeepSeek-V2's and Llama 4's freqs_cis, for their apply_rotary_emb
        # (the one on (batch, heads, seq, dim), the other on (batch, seq, heads, dim))
        if not hasattr(module, "apply_rotary_emb"):
            return None
        width = 2 * tables.shape[-1]  # one complex number per pair

        def rotate(x):
            try:
                return module.apply_rotary_emb(x, x, tables)[0]
            except RuntimeError:
                xt = x.transpose(1, 2)
                return module.apply_rotary_emb(xt, xt, tables)[0].transpose(1, 2)

    else:
        cos, sin = tables
        width = cos.shape[-1]
        apply = getattr(module, "apply_rotary_pos_emb", None)
        if getattr(config, "rope_interleave", False) or _interleaving(module, rotary):
            apply = module.apply_rotary_pos_emb_interleave
        one_tensor = next(iter(inspect.signature(apply).parameters)) == "x"  # Gemma 3n's, 4's

        def rotate(x):
            return apply(x, cos, sin) if one_tensor else apply(x, x, cos, sin)[0]

    for dim in _head_dims(config, layer_type):
        rng = np.random.default_rng(dim)
        x = torch.from_numpy(rng.standard_normal((1, 2, POSITIONS, dim)).astype(np.float32))
        try:
            want = rotate(x).numpy()  # tables of the whole head, or of half of it (GPT-OSS's)
        except Exception:
            if width >= dim:
                continue
            try:  # partial rotary, as the attention splits it (Phi)
                part = rotate(x[..., :width])
            except Exception:
                continue
            want = torch.cat([part, x[..., width:]], dim=-1).numpy()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    got = posenc.apply_rope(x.numpy(), ids, scaling=config, **kwargs)
                except ValueError as exc:
                    if "pass layout=" not in str(exc):
                        raise
                    # the layout the error names must be the model's
                    layout = str(exc).split("pass layout=")[1].split("'")[1]
                    got = posenc.apply_rope(x.numpy(), ids, scaling=config, layout=layout,
                                            **kwargs)  # fmt: skip
        except (TypeError, ValueError):
            return "refused"
        err = float(np.abs(got - want).max())
        # float32 phases below 64 and float32 values of |x| < 6
        return "match" if err < 1e-3 else f"dim {dim}: off by {err:.3g}"
    return None


def test_every_rotary_module_rotates_as_its_model_or_is_refused(hf, torch):
    tally, silent = _sweep(hf, torch, _apply_check)
    assert not silent, "\n".join(silent)
    assert tally.get("match", 0) >= 150, tally
