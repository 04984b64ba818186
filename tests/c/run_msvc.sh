#!/usr/bin/env bash
# The C sources as MSVC sees them, on a machine without Windows: every kernel
# file of src/ (not the Python glue, src/module*.c: this Python's headers are
# Linux ones, and no pyconfig.h of Windows is at hand) compiled by clang-cl
# for x86-64 Windows (clang --driver-mode=cl --target=x86_64-pc-windows-msvc:
# _MSC_VER and _M_X64 defined, __GNUC__ not, so the MSVC spellings of
# simd.h, simd.c's cpuid and xgetbv, and PE_X86 with the *_avx2.c and
# *_avx512.c files are what is compiled), with setup.py's flags for MSVC
# (MSVC_FLAGS), with and without /openmp, its warnings and GCC's extensions (variable-length
# arrays, statement expressions, ...) made errors (MSVC's own keywords,
# __forceinline and __declspec, allowed).  Also: no GCC-only spelling
# (__builtin_*, __attribute__, __asm__, __typeof__, ...) left in what the
# preprocessor gives MSVC to compile (clang-cl would take them); no
# contraction of a * b + c into an FMA; every `#pragma omp` held to OpenMP
# 2.0, all MSVC's /openmp takes (tests/c/openmp2.awk).  Compile only:
# nothing is linked or run (no MSVC C library, linker or Windows here).
#
# The C library's headers are mingw-w64's (Debian's mingw-w64-x86-64-dev),
# written for GCC: the few spellings of theirs no MSVC header has are
# undone first (the prelude below).  clang 14's immintrin.h declares the
# AVX types in MSVC mode only under /arch:AVX (MSVC's own declares them
# always): the *_avx2.c files get /arch:AVX2, the *_avx512.c ones
# /arch:AVX512, the *_avx512bf16.c ones that and AVX-512 BF16 (clang-cl's
# /arch has no name for it), the others none.
#
# CLANG overrides clang, MINGW_INCLUDE the headers' folder, PYTHON the
# python3 that reads setup.py.  Exit status: 0, 1 on any error, 2 if a
# tool is missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
CLANG=${CLANG:-clang}
MINGW_INCLUDE=${MINGW_INCLUDE:-/usr/x86_64-w64-mingw32/include}
command -v "$CLANG" > /dev/null || { echo "run_msvc.sh: $CLANG is missing" >&2; exit 2; }
[ -f "$MINGW_INCLUDE/_mingw.h" ] ||
    { echo "run_msvc.sh: the mingw-w64 headers are missing ($MINGW_INCLUDE)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

awk -f tests/c/openmp2.awk src/*.c src/*.h

cat > "$out/mingw_as_msvc.h" << 'PRELUDE'
#include <_mingw.h>
/* mingw-w64's _setjmp takes two arguments, the one intrin.h declares one */
#define _setjmp pe_mingw_setjmp
#include <setjmp.h>
#undef _setjmp
/* without __GNUC__, _mingw.h defines __attribute__ away (clang's intrinsic
 * headers need it) and puts __declspec(noreturn) after declarators */
#undef __attribute__
#undef __MINGW_ATTRIB_NORETURN
#define __MINGW_ATTRIB_NORETURN
#undef __MINGW_ATTRIB_DEPRECATED
#define __MINGW_ATTRIB_DEPRECATED
PRELUDE

# setup.py's flags for MSVC (its list MSVC_FLAGS, read as a literal)
read -r -a msvc_flags <<< "$("${PYTHON:-python3}" -c 'import ast
for node in ast.parse(open("setup.py").read()).body:
    if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "MSVC_FLAGS":
        print(*ast.literal_eval(node.value))')"
[[ " ${msvc_flags[*]} " == *" /fp:precise "* ]] ||
    { echo "run_msvc.sh: setup.py has no MSVC_FLAGS list with /fp:precise" >&2; exit 1; }
cl=("$CLANG" --driver-mode=cl --target=x86_64-pc-windows-msvc /nologo "${msvc_flags[@]}"
    /W4 /WX -Wno-unused-parameter -Wno-missing-field-initializers
    -Wpedantic -Wno-language-extension-token -Werror=vla -Werror=gnu /FI"$out/mingw_as_msvc.h" /imsvc "$MINGW_INCLUDE" -Isrc)

# the build sees the x86-64 kernels: PE_X86 is 1
printf '#include "simd.h"\n#if !PE_X86 || PE_ARM\n#error PE_X86 is 0 under MSVC on x86-64\n#endif\n' > "$out/probe.c"
"${cl[@]}" /c /Fo"$out/probe.obj" "$out/probe.c"

# no GCC-only spelling left in what MSVC compiles: each file preprocessed
# as MSVC's (the system headers empty, so that only src/'s own code and
# macros are expanded), its lines from src/ searched (pragmas aside:
# avx2.h's clang pragma is clang-cl's)
mkdir "$out/empty"
for h in $(grep -h -o '#include <[^>]*>' src/*.c src/*.h | sed 's/#include <\(.*\)>/\1/' | sort -u); do
    mkdir -p "$(dirname "$out/empty/$h")"
    : > "$out/empty/$h"
done
gnu='__builtin_|__attribute__|__asm__|__asm[ (]|__typeof__|__extension__|__restrict__|aligned_alloc|posix_memalign|__thread'
for f in src/*.c; do
    [[ $f == src/module*.c ]] && continue
    "$CLANG" --driver-mode=cl --target=x86_64-pc-windows-msvc /nologo /std:c11 /openmp /X \
        /I"$out/empty" -Isrc /E "$f" > "$out/pre.c"
    awk -v gnu="$gnu" '
        /^#line [0-9]+ "/ || /^# [0-9]+ "/ { file = $3; gsub(/"/, "", file); next }
        file ~ /^src\// && !/^[ \t]*#[ \t]*pragma/ && $0 ~ gnu {
            print file ": GCC only, compiled by MSVC: " $0; bad = 1
        }
        END { exit bad }' "$out/pre.c"
done

# no contraction into FMA (pe.h's pragma, -ffp-contract=off's twin), even
# where the target has FMA: a * b + c is a multiply and an add
if command -v objdump > /dev/null; then
    printf '#include "pe.h"\ndouble f(double a, double b, double c) { return a * b + c; }\n' > "$out/fma.c"
    "${cl[@]}" /arch:AVX2 /c /Fo"$out/fma.obj" "$out/fma.c"
    objdump -d "$out/fma.obj" > "$out/fma.s"
    grep -q vmulsd "$out/fma.s" && ! grep -q vfmadd "$out/fma.s" ||
        { cat "$out/fma.s"; echo "run_msvc.sh: a * b + c contracted into an FMA" >&2; exit 1; }
fi

n=0
for omp in /openmp "-Wno-unknown-pragmas -Wno-source-uses-openmp"; do
    for f in src/*.c; do
        [[ $f == src/module*.c ]] && continue
        arch=()
        [[ $f == *_avx2.c ]] && arch=(/arch:AVX2)
        [[ $f == *_avx512.c ]] && arch=(/arch:AVX512)
        [[ $f == *_avx512bf16.c ]] && arch=(/arch:AVX512 /clang:-mavx512bf16)
        # shellcheck disable=SC2086
        "${cl[@]}" $omp "${arch[@]}" /c /Fo"$out/kernel.obj" "$f"
        n=$((n + 1))
    done
done
echo "run_msvc.sh: $n compiled by clang-cl for x86_64-pc-windows-msvc (with /openmp and without), 0 failed; compile only"
