"""Build script: the Cython kernels, and the package layout.

The repository keeps three top-level source trees that install as one package:

    cairnq/      -> cairnq
    _speedups/   -> cairnq._speedups   (Cython kernels + their pure-Python twins)
    protocol/    -> cairnq._protocol   (SQL statements and migrations, as data)

Every extension is optional: without a C compiler (or with
CAIRNQ_NO_EXTENSIONS=1) the build still succeeds and cairnq runs on the
pure-Python twins, reporting ``cairnq.SPEEDUPS == "python"``.
"""

from __future__ import annotations

import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

KERNELS = ("rows_c", "jsoncodec_c", "beats_c", "backoff_c", "ids_c", "steps_c")


class OptionalBuildExt(build_ext):
    """Warn instead of failing when an extension cannot be compiled."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler at all: distutils raises here
            self._skip(exc)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            self._skip(exc, ext.name)

    @staticmethod
    def _skip(exc: Exception, name: str = "extensions") -> None:
        print(f"WARNING: could not build {name} ({exc}); cairnq will use pure Python")


def extensions() -> list[Extension]:
    if os.environ.get("CAIRNQ_NO_EXTENSIONS", "") not in ("", "0"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("WARNING: Cython is not installed; cairnq will use pure Python")
        return []
    exts = [
        Extension(f"cairnq._speedups.{name}", [f"_speedups/{name}.pyx"], optional=True)
        for name in KERNELS
    ]
    return cythonize(exts, compiler_directives={"language_level": "3"}, quiet=True)


setup(
    packages=[
        "cairnq",
        "cairnq.store",
        "cairnq.store.sqlite",
        "cairnq.store.postgres",
        "cairnq.store.ops",
        "cairnq.worker",
        "cairnq.periodic",
        "cairnq.observability",
        "cairnq.cli",
        "cairnq.dashboard",
        "cairnq.contrib",
        "cairnq.contrib.django",
        "cairnq.contrib.django.management",
        "cairnq.contrib.django.management.commands",
        "cairnq.testing",
        "cairnq._speedups",
        "cairnq._protocol",
        *(f"cairnq._protocol.{kind}.{dialect}" for kind in ("migrations", "sql") for dialect in ("sqlite", "postgres")),
    ],
    package_dir={
        "cairnq": "cairnq",
        "cairnq._speedups": "_speedups",
        "cairnq._protocol": "protocol",
    },
    package_data={
        "cairnq": ["py.typed"],
        "cairnq.dashboard": ["templates/*.html", "static/*"],
        **{
            f"cairnq._protocol.{kind}.{dialect}": ["*.sql"]
            for kind in ("migrations", "sql")
            for dialect in ("sqlite", "postgres")
        },
        "cairnq._speedups": ["*.pyx", "*.pyi"],
    },
    # The pytest plugin (entry point pytest11 "cairnq"), outside the package so
    # that pytest's start-up in a project with cairnq installed imports no cairnq.
    py_modules=["_cairnq_pytestplugin"],
    ext_modules=extensions(),
    cmdclass={"build_ext": OptionalBuildExt},
)
