"""Build of posenc._core: C11, -O3, OpenMP where the compiler has it.

The AVX2+FMA kernels are chosen at run time (src/simd.h), so no -mavx2 or
-march flag is passed and a wheel built on one x86-64 machine runs on any.

Environment knobs for special builds:
  POSENC_NO_OPENMP=1            build without OpenMP (one thread)
  POSENC_SANITIZE=address,undefined  build with those sanitizers (CI)
"""

import os
import sys
import tempfile
from glob import glob

import numpy as np
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


def _compiler_accepts(compiler, args, source="int main(void) { return 0; }\n"):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "probe.c")
        with open(path, "w") as f:
            f.write(source)
        try:
            objs = compiler.compile([path], output_dir=tmp, extra_postargs=args)
            compiler.link_executable(objs, os.path.join(tmp, "probe"), extra_postargs=args)
        except Exception:
            return False
    return True


class BuildExt(build_ext):
    def build_extensions(self):
        msvc = self.compiler.compiler_type == "msvc"
        for ext in self.extensions:
            if msvc:
                ext.extra_compile_args += ["/O2", "/std:c11", "/fp:precise"]
                if not os.environ.get("POSENC_NO_OPENMP"):
                    ext.extra_compile_args.append("/openmp")
                continue
            ext.extra_compile_args += [
                "-std=c11",
                "-O3",
                "-ffp-contract=off",  # same bits on every path: FMA only where written
                "-fno-math-errno",
                "-Wall",
                "-Wundef",
                "-Wextra",
                "-Wno-unused-parameter",
                "-Wno-missing-field-initializers",
                "-Wno-cast-function-type",
            ]
            omp = ["-fopenmp"]
            if not os.environ.get("POSENC_NO_OPENMP") and _compiler_accepts(
                self.compiler,
                omp,
                "#include <omp.h>\nint main(void){return omp_get_max_threads()<0;}\n",
            ):
                ext.extra_compile_args += omp
                ext.extra_link_args += omp
            else:
                print("posenc: building without OpenMP", file=sys.stderr)
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
        super().build_extensions()


core = Extension(
    "posenc._core",
    sources=sorted(glob("src/*.c")),
    depends=sorted(glob("src/*.h")),
    include_dirs=[np.get_include(), "src"],
    define_macros=[("NPY_TARGET_VERSION", "NPY_1_22_API_VERSION")],
)

setup(ext_modules=[core], cmdclass={"build_ext": BuildExt})
