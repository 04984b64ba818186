"""posenc: positional encodings of Transformer models as fast NumPy kernels.

Encodings (NumPy arrays in, NumPy arrays out; torch tensors and JAX arrays in,
their own kind out, see the README's "With PyTorch and JAX"):

- :func:`sinusoid`: the absolute sinusoidal table of Vaswani et al.
- :func:`apply_rope`, :func:`rope_cos_sin`, :func:`rope_frequencies`: rotary
  embeddings in the half-split and interleaved layouts, partial rotary,
  arbitrary position ids, and the context-extension families (linear,
  dynamic NTK, YaRN, Llama 3, LongRoPE, NTK-alpha, proportional);
  :func:`positions_from_cu_seqlens`, :func:`permute_rope_weight`,
  :func:`attention_temperature`, :func:`mrope_position_ids`,
  :func:`vision_position_ids` around them.
- :func:`alibi_bias`, :func:`alibi_key_bias`, :func:`alibi_slopes`: ALiBi; :func:`t5_bias`,
  :func:`relative_position_bucket`: T5's bucketed relative bias;
  :func:`relative_positions`: Shaw et al.'s clipped relative positions.
- The relative encodings inside attention (:mod:`posenc.relative`):
  Transformer-XL / XLNet (:func:`xl_relative_table`, :func:`xl_position_term`,
  :func:`xl_content_bias`), TENER (:func:`tener_relative_table`,
  :func:`tener_position_term`, :func:`tener_scores`), DeBERTa
  (:func:`deberta_log_bucket`, :func:`deberta_relative_positions`,
  :func:`deberta_attention_bias`), Shaw et al. (:func:`shaw_key_term`,
  :func:`shaw_value_term`) and TUPE (:func:`tupe_bias`).
- The encodings researchers compare against since 2022: KERPLE
  (:func:`kerple_bias`), Sandwich (:func:`sandwich_bias`), FIRE
  (:func:`fire_bias`), CoPE (:func:`cope_bias`), complex-order embeddings
  (:func:`complex_order_embedding`), Llama 4's iRoPE (:func:`irope_layers`,
  :func:`chunked_causal_mask`), and position ids sampled for length
  generalisation (:func:`randomized_position_ids`, :func:`pose_position_ids`).

Analyses (:mod:`posenc.probe`): what a position embedding has learned, after
Wang & Chen, "What Do Position Embeddings Learn?" (EMNLP 2020).

Configuration: :func:`show_config`, :func:`set_num_threads`,
:func:`get_num_threads`.  The pure-NumPy twin of every kernel is in
:mod:`posenc.reference`.
"""

try:
    # first, so that a missing build is reported here; _openmp sets how long
    # OpenMP's threads wait before it loads posenc._core
    from . import _openmp  # noqa: F401
except ImportError as _exc:  # as NumPy does: say what to do, not only what failed
    import os as _os

    _tree = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
    if _os.path.isfile(_os.path.join(_tree, "setup.py")) and _os.path.isfile(
        _os.path.join(_tree, "src", "module.c")
    ):
        raise ImportError(
            f"posenc is being imported from its source tree ({_tree}), where its C extension "
            "posenc._core has not been built.  Install it (pip install . ; pip install -e . to "
            "develop) and run Python, a notebook or pytest from another directory, or use the "
            "installed command: posenc probe"
        ) from _exc
    raise ImportError(
        f"posenc's C extension posenc._core cannot be imported ({_exc}); reinstall posenc"
    ) from _exc

from . import positions, probe, reference
from ._config import config, get_num_threads, set_num_threads, show_config, simd_path
from ._irope import chunked_causal_mask, irope_layers
from ._version import __version__
from .bias import (
    alibi_bias,
    alibi_key_bias,
    alibi_slopes,
    relative_position_bucket,
    relative_positions,
    t5_bias,
)
from .complex_order import complex_order_embedding
from .cope import cope_bias
from .functional_bias import fire_bias, kerple_bias, sandwich_bias
from .positions import pose_position_ids, randomized_position_ids
from .relative import (
    deberta_attention_bias,
    deberta_log_bucket,
    deberta_relative_positions,
    shaw_key_term,
    shaw_value_term,
    tener_position_term,
    tener_relative_table,
    tener_scores,
    tupe_bias,
    xl_content_bias,
    xl_position_term,
    xl_relative_table,
)
from .rope import Rope, apply_rope, rope_cos_sin, rope_frequencies
from .rope_tools import (
    attention_temperature,
    mrope_position_ids,
    permute_rope_weight,
    positions_from_cu_seqlens,
    vision_position_ids,
)
from .sinusoid import sinusoid

__all__ = [
    "Rope",
    "__version__",
    "alibi_bias",
    "alibi_key_bias",
    "alibi_slopes",
    "apply_rope",
    "attention_temperature",
    "chunked_causal_mask",
    "complex_order_embedding",
    "config",
    "cope_bias",
    "deberta_attention_bias",
    "deberta_log_bucket",
    "deberta_relative_positions",
    "fire_bias",
    "get_num_threads",
    "irope_layers",
    "kerple_bias",
    "mrope_position_ids",
    "permute_rope_weight",
    "pose_position_ids",
    "positions",
    "positions_from_cu_seqlens",
    "probe",
    "randomized_position_ids",
    "reference",
    "relative_position_bucket",
    "relative_positions",
    "rope_cos_sin",
    "rope_frequencies",
    "sandwich_bias",
    "set_num_threads",
    "shaw_key_term",
    "shaw_value_term",
    "show_config",
    "simd_path",
    "sinusoid",
    "t5_bias",
    "tener_position_term",
    "tener_relative_table",
    "tener_scores",
    "tupe_bias",
    "vision_position_ids",
    "xl_content_bias",
    "xl_position_term",
    "xl_relative_table",
]
