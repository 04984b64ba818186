"""Build of posenc._core: C11, -O3, OpenMP where the compiler has it.

The AVX2+FMA kernels are chosen at run time (src/simd.h) and compiled with a
target pragma in their own files (src/*_avx2.c; MSVC needs none), so no
-mavx2, -march or /arch flag is passed and a wheel built on one x86-64
machine runs on any.  A release build carries no debug information (-g0,
symbols stripped on Linux).

Environment knobs for special builds:
  POSENC_NO_OPENMP=1            build without OpenMP (one thread)
  POSENC_SANITIZE=address,undefined  build with those sanitizers (CI), -g kept
  POSENC_DEBUG=1                keep the debug information of CFLAGS (-g)
  POSENC_BUILD_JOBS=N           compile N C files at a time (default: the CPUs
                                this process may run on; 1: one at a time)
"""

import os
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from glob import glob

import numpy as np
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# The warnings of every GCC or clang build; .ci/run reads these lists (as
# literals) to compile the sources for -m32 and with clang, -Werror added.
WARNINGS = [
    "-Wall",
    "-Wundef",
    "-Wextra",
    "-Wno-unused-parameter",
    "-Wno-missing-field-initializers",
    "-Wno-cast-function-type",
]
# Without OpenMP its pragmas are unknown to GCC, on purpose.
NO_OPENMP_WARNINGS = ["-Wno-unknown-pragmas"]
# MSVC (x86-64: both paths, the AVX2 kernels chosen at run time as with GCC;
# tests/c/run_msvc.sh reads this list and compiles with it by clang-cl).  /fp:precise: every
# operation rounded as written, no reassociation (never /fp:fast); no /arch:
# the baseline SSE2 target for the portable code, the *_avx2.c files' FMAs
# only where their intrinsics write them; no contraction of a * b + c in
# any case (src/pe.h's fp_contract(off), the default at /fp:precise since
# Visual Studio 2022).  OpenMP 2.0, /openmp: the pragmas keep to it
# (tests/c/openmp2.awk), so the LLVM runtime of /openmp:llvm is not needed.
MSVC_FLAGS = ["/O2", "/std:c11", "/fp:precise"]
# 32-bit x86: double arithmetic in SSE2 registers, as on x86-64 and in the
# AVX2 kernels, not in the x87's extended precision (which rounds twice):
# the same bits on every path.
I386_FLAGS = ["-msse2", "-mfpmath=sse"]


def _compiler_accepts(compiler, args, source="int main(void) { return 0; }\n"):
    """Whether source compiles and links with args (the compiler's messages
    about a probe that fails are not shown)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "probe.c")
        with open(path, "w") as f:
            f.write(source)
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            objs = compiler.compile([path], output_dir=tmp, extra_postargs=args)
            compiler.link_executable(objs, os.path.join(tmp, "probe"), extra_postargs=args)
        except Exception:
            return False
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in (*saved, devnull):
                os.close(fd)
    return True


def _targets(compiler, macro):
    """Whether the compiler's target defines `macro` (e.g. __i386__)."""
    probe = f"#ifndef {macro}\n#error\n#endif\nint main(void) {{ return 0; }}\n"
    return _compiler_accepts(compiler, [], probe)


def _jobs():
    value = os.environ.get("POSENC_BUILD_JOBS", "")
    if value:
        return max(1, int(value))
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _compile_in_parallel(compiler, jobs):
    """Make ``compiler.compile`` compile its sources `jobs` at a time (each
    file is one compiler process; the first alone, so that the object
    folders exist before the others start)."""
    one_by_one = compiler.compile

    def compile(sources, *args, **kwargs):
        sources = list(sources)
        if jobs <= 1 or len(sources) <= 2:
            return one_by_one(sources, *args, **kwargs)
        objects = one_by_one(sources[:1], *args, **kwargs)
        with ThreadPoolExecutor(jobs) as pool:
            for more in pool.map(lambda src: one_by_one([src], *args, **kwargs), sources[1:]):
                objects += more
        return objects

    compiler.compile = compile


class BuildExt(build_ext):
    def build_extensions(self):
        if self.compiler.compiler_type == "unix":
            _compile_in_parallel(self.compiler, _jobs())
        msvc = self.compiler.compiler_type == "msvc"
        for ext in self.extensions:
            if msvc:
                ext.extra_compile_args += MSVC_FLAGS
                if not os.environ.get("POSENC_NO_OPENMP"):
                    ext.extra_compile_args.append("/openmp")
                continue
            ext.extra_compile_args += [
                "-std=c11",
                "-O3",
                "-ffp-contract=off",  # same bits on every path: FMA only where written
                "-fno-math-errno",
                *WARNINGS,
            ]
            if _targets(self.compiler, "__i386__"):
                ext.extra_compile_args += I386_FLAGS
            omp = ["-fopenmp"]
            if not os.environ.get("POSENC_NO_OPENMP") and _compiler_accepts(
                self.compiler,
                omp,
                "#include <omp.h>\nint main(void){return omp_get_max_threads()<0;}\n",
            ):
                ext.extra_compile_args += omp
                ext.extra_link_args += omp
            else:
                # Apple's clang, for one, has no -fopenmp
                print("posenc: building without OpenMP", file=sys.stderr)
                ext.extra_compile_args += NO_OPENMP_WARNINGS
            sanitize = os.environ.get("POSENC_SANITIZE")
            if sanitize:
                flags = [
                    f"-fsanitize={sanitize}",
                    "-fno-omit-frame-pointer",
                    "-g",
                    "-fno-sanitize-recover=all",
                ]
                ext.extra_compile_args += flags + ["-O1"]
                ext.extra_link_args += flags
            elif not os.environ.get("POSENC_DEBUG"):
                # a release build: no debug information (Python's CFLAGS has -g)
                ext.extra_compile_args.append("-g0")
                if sys.platform.startswith("linux"):
                    ext.extra_link_args.append("-s")
        super().build_extensions()


core = Extension(
    "posenc._core",
    sources=sorted(glob("src/*.c")),
    depends=sorted(glob("src/*.h")),
    include_dirs=[np.get_include(), "src"],
    define_macros=[("NPY_TARGET_VERSION", "NPY_1_22_API_VERSION")],
)

setup(ext_modules=[core], cmdclass={"build_ext": BuildExt})
