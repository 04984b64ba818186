#!/usr/bin/env bash
# The NEON kernels against the portable ones, bit for bit, under emulation:
# tests/c/kernels_neon.c and the kernel files of src/ (not the Python glue,
# src/module*.c) cross-compiled for AArch64 with the flags of setup.py's
# builds (-O3, -ffp-contract=off, OpenMP, its warnings made errors), linked
# statically and run with qemu-aarch64.  Needs Debian's gcc-aarch64-linux-gnu
# and qemu-user; CC and QEMU override the commands.  Exit status: the test
# program's (non-zero on any difference), 2 if a tool is missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
CC=${CC:-aarch64-linux-gnu-gcc}
QEMU=${QEMU:-qemu-aarch64}
for tool in "$CC" "$QEMU"; do
    command -v "$tool" > /dev/null || { echo "run_neon.sh: $tool is missing" >&2; exit 2; }
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
kernels=()
for f in src/*.c; do
    [[ $f == src/module*.c ]] || kernels+=("$f")
done
"$CC" -std=c11 -O3 -ffp-contract=off -fno-math-errno -fopenmp -static \
    -Wall -Wundef -Wextra -Wno-unused-parameter -Wno-missing-field-initializers \
    -Wno-cast-function-type -Werror -Isrc \
    -o "$out/kernels_neon" tests/c/kernels_neon.c "${kernels[@]}" -lm
"$QEMU" "$out/kernels_neon"
