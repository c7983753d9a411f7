"""The native OTLP decoders, built by `pip install` with the system C compiler: lousho/observe/decode/native/otlp/
(protobuf -> the store's Arrow columns) and lousho/observe/decode/native/json/ (OTLP/JSON -> protobuf wire bytes for
it). Each extension is its directory's .c files, sharing the directory's one private header.

Everything else about the package is in pyproject.toml; setuptools reads both.
"""

from glob import glob

from setuptools import Extension, setup

_FLAGS = ["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]


def _extension(name: str, directory: str) -> Extension:
    # Relative paths, sorted: setuptools wants them relative to this file, and a fixed order builds the same .so.
    # depends= also puts the header in the sdist, so `pip install` from an sdist builds.
    return Extension(name, sources=sorted(glob(f"{directory}/*.c")), depends=sorted(glob(f"{directory}/*.h")),
                     extra_compile_args=_FLAGS)


setup(
    ext_modules=[
        _extension("lousho.observe.decode._otlp_native", "lousho/observe/decode/native/otlp"),
        _extension("lousho.observe.decode._otlp_json", "lousho/observe/decode/native/json"),
    ]
)
