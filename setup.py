"""The native OTLP decoders (lousho/observe/_otlp_native.c for protobuf, _otlp_json.c for JSON), built by
`pip install` with the system C compiler.

Everything else about the package is in pyproject.toml; setuptools reads both.
"""

from setuptools import Extension, setup

_FLAGS = ["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]

setup(
    ext_modules=[
        Extension("lousho.observe._otlp_native", sources=["lousho/observe/_otlp_native.c"],
                  extra_compile_args=_FLAGS),
        Extension("lousho.observe._otlp_json", sources=["lousho/observe/_otlp_json.c"], extra_compile_args=_FLAGS),
    ]
)
