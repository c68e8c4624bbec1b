"""Differentially private streaming sketches as Apache Beam transforms.

The names in ``__all__`` are the user-facing API; everything else stays importable from its
module::

    import apache_beam as beam
    import beam_dpsketch as dps

    with beam.Pipeline("DirectRunner") as p:
        keys = p | dps.ReadKeyBatches("events.parquet", column="airport")
        top = keys | dps.DPHeavyHitters(k=64, budget=dps.PrivacyBudget.approx(1.0, 1e-6))

Every ``DP*`` transform and :class:`ContinualDPSketch` is differentially private with respect
to the privacy unit and the budget it is given, under the conditions stated in its docstring;
:func:`explain_pipeline` prints what a :class:`PrivacyAccountant` has charged. Subpackages:

* :mod:`beam_dpsketch.transforms`: the Beam transforms, readers and release types;
* :mod:`beam_dpsketch.io`: the readers of Parquet, CSV, JSON Lines and text files, and the
  command line's output sinks;
* :mod:`beam_dpsketch.privacy`: budgets, the accountant, release planning, contribution bounding;
* :mod:`beam_dpsketch.sketches`: exact, mergeable sketches and their DP releases (pure numpy);
* :mod:`beam_dpsketch.pipelines`: the ``beam-dpsketch`` command line.

The reproduction of the papers' experiments (``beam-dpsketch evaluate``) is not part of the
package: it is the ``reproduction/`` folder of the source repository.

``import beam_dpsketch`` is cheap: each name imports its module (and Apache Beam, for the
transforms) the first time it is used (PEP 562 module ``__getattr__``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from beam_dpsketch.noise import NoiseSource
    from beam_dpsketch.privacy import (
        BudgetExceededError,
        PrivacyAccountant,
        PrivacyBudget,
        PrivacyUnit,
        Windowing,
    )
    from beam_dpsketch.serialization import SketchFormatError
    from beam_dpsketch.transforms import (
        BoundContributions,
        ContinualDPSketch,
        DPCount,
        DPFrequencies,
        DPHeavyHitters,
        DPHistogram,
        DPIntermittentQueries,
        DPQuantiles,
        DPSlidingWindowFrequencies,
        DPTopKeys,
        QuerySchedule,
        ReadKeyBatches,
        ReadOrderedKeys,
        Release,
        explain_pipeline,
    )
    from beam_dpsketch.transforms.quantiles import QuantileTree
    from beam_dpsketch.transforms.sliding import SlidingLayout


def _read_version() -> str:
    """The installed distribution's version, else the one in the source tree's pyproject.toml."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("beam-dpsketch")
    except PackageNotFoundError:
        # Running from a source tree that was never installed: read the declared version.
        import tomllib
        from pathlib import Path

        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        try:
            with pyproject.open("rb") as f:
                return str(tomllib.load(f)["project"]["version"])
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "0+unknown"


__version__: str  # read on first access (importlib.metadata alone costs ~25 ms to import)

# Public name -> the module that defines it; resolved on first access by __getattr__ below.
_EXPORTS: dict[str, str] = {
    # Differentially private transforms.
    "DPCount": "beam_dpsketch.transforms",
    "DPHistogram": "beam_dpsketch.transforms",
    "DPHeavyHitters": "beam_dpsketch.transforms",
    "DPFrequencies": "beam_dpsketch.transforms",
    "DPQuantiles": "beam_dpsketch.transforms",
    "QuantileTree": "beam_dpsketch.transforms.quantiles",
    "ContinualDPSketch": "beam_dpsketch.transforms",
    "DPSlidingWindowFrequencies": "beam_dpsketch.transforms",
    "SlidingLayout": "beam_dpsketch.transforms.sliding",
    "DPIntermittentQueries": "beam_dpsketch.transforms",
    "DPTopKeys": "beam_dpsketch.transforms",
    # Inputs: contribution bounding, readers and the public query schedule.
    "BoundContributions": "beam_dpsketch.transforms",
    "ReadKeyBatches": "beam_dpsketch.transforms",
    "ReadOrderedKeys": "beam_dpsketch.transforms",
    "QuerySchedule": "beam_dpsketch.transforms",
    # Release metadata and the accountant's report.
    "Release": "beam_dpsketch.transforms",
    "explain_pipeline": "beam_dpsketch.transforms",
    # Budgets, accounting and randomness.
    "PrivacyBudget": "beam_dpsketch.privacy",
    "PrivacyAccountant": "beam_dpsketch.privacy",
    # Declarations handed to the transforms: whom they protect, what the windowing guarantees.
    "PrivacyUnit": "beam_dpsketch.privacy",
    "Windowing": "beam_dpsketch.privacy",
    "NoiseSource": "beam_dpsketch.noise",
    # Errors users catch.
    "BudgetExceededError": "beam_dpsketch.privacy",
    "SketchFormatError": "beam_dpsketch.serialization",
}

#: Subpackages and modules reachable as attributes (imported on first access).
_SUBPACKAGES = frozenset(
    {"checks", "hashing", "io", "noise", "privacy", "serialization", "sketches", "transforms"}
)

__all__ = [
    "__version__",
    "BoundContributions",
    "BudgetExceededError",
    "ContinualDPSketch",
    "DPCount",
    "DPFrequencies",
    "DPHeavyHitters",
    "DPHistogram",
    "DPIntermittentQueries",
    "DPQuantiles",
    "DPSlidingWindowFrequencies",
    "DPTopKeys",
    "NoiseSource",
    "PrivacyAccountant",
    "PrivacyBudget",
    "PrivacyUnit",
    "QuantileTree",
    "QuerySchedule",
    "ReadKeyBatches",
    "ReadOrderedKeys",
    "Release",
    "SketchFormatError",
    "SlidingLayout",
    "Windowing",
    "explain_pipeline",
]


def __getattr__(name: str) -> Any:
    """Import a public name's module on first access (PEP 562) and cache the name here."""
    if name == "__version__":
        value: Any = _read_version()
    elif name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif name in _SUBPACKAGES:
        # ``dps.transforms.DPTransform`` works without a separate ``import`` statement.
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    """Module attributes, including the public names not imported yet."""
    return sorted({*globals(), *__all__})
