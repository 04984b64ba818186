"""posenc: positional encodings of Transformer models as fast NumPy kernels.

Encodings (NumPy arrays in, NumPy arrays out):

- :func:`sinusoid`: the absolute sinusoidal table of Vaswani et al.

Configuration: :func:`show_config`, :func:`set_num_threads`,
:func:`get_num_threads`.  The pure-NumPy twin of every kernel is in
:mod:`posenc.reference`.
"""

from ._config import config, get_num_threads, set_num_threads, show_config, simd_path
from ._version import __version__
from .absolute import sinusoid

# rotary position embedding
from .rope import apply_rope as apply_rope
from .rope import rope_cos_sin as rope_cos_sin
from .rope import rope_frequencies as rope_frequencies

# attention biases

__all__ = [
    "__version__",
    "config",
    "get_num_threads",
    "set_num_threads",
    "show_config",
    "simd_path",
    "sinusoid",
]
