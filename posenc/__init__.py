"""posenc: positional encodings of Transformer models as fast NumPy kernels.

Encodings (NumPy arrays in, NumPy arrays out):

- :func:`sinusoid`: the absolute sinusoidal table of Vaswani et al.

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

# rotary position embedding
from .rope import apply_rope as apply_rope
from .rope import rope_cos_sin as rope_cos_sin
from .rope import rope_frequencies as rope_frequencies

# attention biases
# isort: split
from .bias import alibi_bias as alibi_bias
from .bias import alibi_slopes as alibi_slopes
from .bias import relative_position_bucket as relative_position_bucket
from .bias import relative_positions as relative_positions
from .bias import t5_bias as t5_bias

__all__ = [
    "__version__",
    "config",
    "get_num_threads",
    "probe",
    "reference",
    "set_num_threads",
    "show_config",
    "simd_path",
    "sinusoid",
]
