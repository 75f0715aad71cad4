"""setup.py: `pip install --no-build-isolation ./python` builds the keel
package offline (Debian's python3-dev, python3-numpy, cmake, a C compiler).

libkeel.so comes from a CMake build of the repository (the directory above
this one) into python/build/libkeel, or from KEEL_LIB_DIR (a build folder
that already holds libkeel.so). It is copied into the package beside the
extension, which finds it through an $ORIGIN rpath: the installed package
needs nothing from the source tree.
"""
import glob
import os
import re
import shutil
import subprocess

import numpy
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def version():
    text = open(os.path.join(ROOT, "include", "keel.h"), encoding="utf-8").read()
    parts = [re.search(rf"#define KEEL_VERSION_{p} (\d+)", text).group(1)
             for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


def libkeel_dir():
    given = os.environ.get("KEEL_LIB_DIR")
    if given:
        return os.path.abspath(given)
    out = os.path.join(HERE, "build", "libkeel")
    subprocess.check_call(["cmake", "-S", ROOT, "-B", out, "-DCMAKE_BUILD_TYPE=Release",
                           "-DKEEL_PYTHON=OFF"], stdout=subprocess.DEVNULL)
    subprocess.check_call(["cmake", "--build", out, "--target", "keel_shared", "-j",
                           str(os.cpu_count() or 2)], stdout=subprocess.DEVNULL)
    return out


class BuildWithLibkeel(build_ext):
    """Builds libkeel first, links the extension to it and ships it."""

    def run(self):
        lib = libkeel_dir()
        for ext in self.extensions:
            ext.library_dirs.append(lib)
        super().run()
        sonames = glob.glob(os.path.join(lib, "libkeel.so.[0-9]"))
        if not sonames:
            raise RuntimeError(f"no libkeel.so.N in {lib}")
        dest = os.path.join(self.build_lib, "keel")
        os.makedirs(dest, exist_ok=True)
        shutil.copy2(os.path.realpath(sonames[0]), os.path.join(dest, os.path.basename(sonames[0])))


setup(
    name="keel",
    version=version(),
    description="keel: an ONNX runtime in C with steady, owner-tagged memory, "
                "with ONNX Runtime's Python API",
    packages=["keel"],
    ext_modules=[Extension(
        "keel._keel", sources=["keel/_keel.c", "keel/_keel_mem.c", "keel/_keel_train.c"],
        include_dirs=[os.path.join(ROOT, "include"), numpy.get_include()],
        libraries=["keel"], runtime_library_dirs=["$ORIGIN"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")])],
    cmdclass={"build_ext": BuildWithLibkeel},
    python_requires=">=3.9",
    install_requires=["numpy"],
)
