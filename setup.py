"""Build step for the C extensions; everything else is configured in pyproject.toml.

Both extensions are optional: where no C compiler works (a slim container, ``CC=/bin/false``),
the build logs a warning and goes on, and the installed package uses the pure-Python fallbacks
``beam_dpsketch.murmur3_fallback`` and ``beam_dpsketch.sketches.misra_gries.kernel_fallback``,
which give bit-identical results, only slower (see ``beam_dpsketch/extensions.py``).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "beam_dpsketch.sketches.misra_gries.kernel",
            ["beam_dpsketch/sketches/misra_gries/kernel.c"],
            optional=True,
        ),
        Extension("beam_dpsketch.murmur3", ["beam_dpsketch/murmur3.c"], optional=True),
    ]
)
