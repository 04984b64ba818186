"""posenc: positional encodings of Transformer models as fast NumPy kernels.

Encodings (NumPy arrays in, NumPy arrays out):

- :func:`sinusoid`: the absolute sinusoidal table of Vaswani et al.
- :func:`apply_rope`, :func:`rope_cos_sin`, :func:`rope_frequencies`: rotary
  embeddings in the half-split and interleaved layouts, partial rotary,
  arbitrary position ids, and the context-extension families (linear,
  dynamic NTK, YaRN, Llama 3, LongRoPE).
- :func:`alibi_bias`, :func:`alibi_slopes`: ALiBi; :func:`t5_bias`,
  :func:`relative_position_bucket`: T5's bucketed relative bias;
  :func:`relative_positions`: Shaw et al.'s clipped relative positions.

Analyses (:mod:`posenc.probe`): what a position embedding has learned, after
Wang & Chen, "What Do Position Embeddings Learn?" (EMNLP 2020).

Configuration: :func:`show_config`, :func:`set_num_threads`,
:func:`get_num_threads`.  The pure-NumPy twin of every kernel is in
:mod:`posenc.reference`.
"""

from . import probe, reference
from ._config import config, get_num_threads, set_num_threads, show_config, simd_path
from ._version import __version__
from .absolute import sinusoid
from .bias import alibi_bias, alibi_slopes, relative_position_bucket, relative_positions, t5_bias
from .rope import apply_rope, rope_cos_sin, rope_frequencies

__all__ = [
    "__version__",
    "alibi_bias",
    "alibi_slopes",
    "apply_rope",
    "config",
    "get_num_threads",
    "probe",
    "reference",
    "relative_position_bucket",
    "relative_positions",
    "rope_cos_sin",
    "rope_frequencies",
    "set_num_threads",
    "show_config",
    "simd_path",
    "sinusoid",
    "t5_bias",
]
