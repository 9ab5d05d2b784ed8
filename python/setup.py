"""Packs the built libzero.so into the package (zero/lib/), so that the installed package does
not depend on the build folder: the library ZERO_LIBRARY names, else this checkout's
build/engine/libzero.so (or the newest other build folder's, sanitizer builds aside). `make`
builds it first."""

import os
import runpy
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


def built_library():
    named = os.environ.get("ZERO_LIBRARY")
    if named:
        path = Path(named)
        if not path.is_file():
            raise SystemExit(f"zero: ZERO_LIBRARY={named} is not a file")
        return path
    here = Path(__file__).resolve().parent
    found = runpy.run_path(str(here / "zero" / "_library.py"))["checkout_libraries"](here.parent)
    if not found:
        raise SystemExit(f"zero: no libzero.so under {here.parent}/build*/engine (sanitizer "
                         f"builds aside): run `make` in {here.parent} first, or set ZERO_LIBRARY "
                         "to a built libzero.so")
    return found[0]


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / "zero" / "lib"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built_library().resolve(), target / "libzero.so")


setup(cmdclass={"build_py": BuildWithLibrary})
