"""The native OTLP decoder (lousho/observe/_otlp_native.c), built by `pip install` with the system C compiler.

Everything else about the package is in pyproject.toml; setuptools reads both.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "lousho.observe._otlp_native",
            sources=["lousho/observe/_otlp_native.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter",
                                "-Wno-missing-field-initializers"],
        )
    ]
)
