# Types of the C extension posenc._core (src/module.c) for type checkers.
#
# The constants and the thread and SIMD controls are typed here; the kernels
# (sinusoid, rope_apply, alibi, t5_bias, ...) take arrays the Python side has
# already checked and change with the C sources, so they are typed by
# __getattr__ (Any).

from typing import Any, Dict

openmp: int
MAX_Q_OFFSET: int
T5_MAX_BUCKETS: int
ROPE_MAX_CHANNELS: int
T5_MAX_DISTANCE: int
SINUSOID_LAYOUTS: Dict[str, int]
ROPE_LAYOUTS: Dict[str, int]
ROPE_INTERLEAVED_TO_HALF: int

def set_num_threads(n: int, /) -> None: ...
def get_num_threads() -> int: ...
def simd_path() -> str: ...
def simd_cpu() -> str: ...
def set_simd(name: str, /) -> str: ...
def __getattr__(name: str) -> Any: ...
