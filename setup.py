"""Build step for the C extensions; everything else is configured in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "beam_dpsketch.sketches.misra_gries.kernel",
            ["beam_dpsketch/sketches/misra_gries/kernel.c"],
        ),
        Extension("beam_dpsketch.murmur3", ["beam_dpsketch/murmur3.c"]),
    ]
)
