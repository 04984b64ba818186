"""Infinities and NaNs as the bits of each scores' dtype, shared by the
tests of the kernels that add into scores (a module, not a test file:
pytest does not collect it)."""

# +inf, -inf, then NaNs: quiet with a payload, signalling of either sign,
# a last one with a wider payload; and the bit that makes a NaN quiet
SPECIAL_BITS = {
    "float16": ([0x7C00, 0xFC00, 0x7E01, 0xFC81, 0x7C21, 0xFE25], 0x0200),
    "bfloat16": ([0x7F80, 0xFF80, 0x7FC1, 0xFF81, 0x7F81, 0xFFA5], 0x0040),
    "float32": ([0x7F800000, 0xFF800000, 0x7FC10000, 0xFF810000, 0x7F810000, 0xFFA5A5A5], 1 << 22),
    "float64": (
        [
            0x7FF << 52,
            0xFFF << 52,
            0x7FF8 << 48 | 1,
            0xFFF0 << 48 | 5,
            0x7FF << 52 | 1,
            0xFFF0A5 << 40,
        ],
        1 << 51,
    ),
}
