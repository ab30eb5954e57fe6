"""The compiled core: Cython extension modules built by `pip install` with the machine's C
compiler (kaudit/native.py chooses them at import). When they cannot be built - no compiler,
no Python headers, no Cython - the install goes on and kaudit runs its pure-Python decoders,
saying so once on stderr. Everything else is in pyproject.toml."""

from __future__ import annotations

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

MODULES = {
    "kaudit.protocol._cbatch": "kaudit/protocol/_cbatch.pyx",
    "kaudit.capture._cstreams": "kaudit/capture/_cstreams.pyx",
    "kaudit.protocol._cframing": "kaudit/protocol/_cframing.pyx",
    "kaudit.protocol._cwire": "kaudit/protocol/_cwire.pyx",
    "kaudit.sources._ccolumns": "kaudit/sources/_ccolumns.pyx",
    "kaudit.sources._crows": "kaudit/sources/_crows.pyx",
    "kaudit.sources._cpcap": "kaudit/sources/_cpcap.pyx",
}


class OptionalBuildExt(build_ext):
    """build_ext that warns instead of failing: the pure path is always there. The extensions
    compile in parallel, one per CPU (serial: ~65 s of a fresh `make test`'s set-up on 2 cores)."""

    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1

    def run(self):
        try:
            super().run()
        except Exception as e:  # noqa: BLE001 - any build failure leaves the pure path
            print(f"kaudit: the compiled core was not built ({e}); kaudit will run pure Python",
                  file=sys.stderr)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as e:  # noqa: BLE001
            print(f"kaudit: {ext.name} was not built ({e}); kaudit will run pure Python", file=sys.stderr)


def extensions():
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("kaudit: Cython is missing; kaudit will run pure Python", file=sys.stderr)
        return []
    # -ffp-contract=off: times are computed as the pure path computes them (no fused multiply-add)
    exts = [Extension(name, [src], include_dirs=["kaudit/protocol"],
                      extra_compile_args=["-O3", "-ffp-contract=off"])
            for name, src in MODULES.items()]
    return cythonize(exts, compiler_directives={"language_level": 3}, quiet=True, nthreads=os.cpu_count() or 1)


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
