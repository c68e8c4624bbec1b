"""The public surface: the top-level API, what each package exports, and private names.

* ``import beam_dpsketch as dps`` gives ``dps.__version__`` and every name of ``dps.__all__``,
  without importing Apache Beam until a transform is used;
* no package ``__init__`` re-exports a private name, and two packages never export different
  objects under one name;
* no library module imports another module's private name (``from m import _x`` or ``m._x``).
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import beam_dpsketch as dps

PACKAGE_DIR = Path(dps.__file__).resolve().parent
PACKAGE = PACKAGE_DIR.name
PYPROJECT = PACKAGE_DIR.parent / "pyproject.toml"

DP_TRANSFORMS = (
    "DPCount",
    "DPHistogram",
    "DPHeavyHitters",
    "DPFrequencies",
    "DPQuantiles",
    "ContinualDPSketch",
    "DPSlidingWindowFrequencies",
    "DPIntermittentQueries",
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _library_modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE_DIR.rglob("*.py"))}


def _packages() -> list[str]:
    return sorted(_module_name(p) for p in PACKAGE_DIR.rglob("__init__.py"))


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


# ------------------------------------------------------------------------------------------------
# The top-level API
# ------------------------------------------------------------------------------------------------


def test_version_is_the_installed_distributions_or_the_pyproject_one(monkeypatch):
    declared = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["version"]
    try:
        installed = importlib.metadata.version("beam-dpsketch")
    except importlib.metadata.PackageNotFoundError:
        installed = declared
    assert isinstance(dps.__version__, str) and dps.__version__ == installed

    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    # A source tree that was never installed reads the version its pyproject.toml declares.
    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert dps._read_version() == declared


def test_every_name_in_all_resolves():
    names = [n for n in dps.__all__ if n != "__version__"]
    assert len(names) == len(set(names)) and "__version__" in dps.__all__
    assert set(names) == set(dps._EXPORTS)
    assert set(DP_TRANSFORMS) <= set(names)
    assert {"PrivacyBudget", "PrivacyAccountant", "NoiseSource", "BoundContributions"} <= set(names)
    assert {"BudgetExceededError", "SketchFormatError", "QuerySchedule"} <= set(names)
    assert {"ReadKeyBatches", "ReadOrderedKeys", "explain_pipeline"} <= set(names)
    for name in names:
        value = getattr(dps, name)
        # The same object as in the module the mapping names, not a copy or a wrapper.
        assert value is getattr(importlib.import_module(dps._EXPORTS[name]), name), name
        assert name in dir(dps)
    for error in ("BudgetExceededError", "SketchFormatError"):
        assert issubclass(getattr(dps, error), Exception)


def test_dp_transforms_are_ptransforms():
    import apache_beam as beam

    for name in DP_TRANSFORMS:
        assert issubclass(getattr(dps, name), beam.PTransform), name


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'NotAName'"):
        dps.NotAName  # noqa: B018 - the attribute access is the test
    assert not hasattr(dps, "SketchCombineFn")  # an internal, importable from its module only


def _fresh_interpreter(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_importing_the_package_does_not_import_beam():
    out = _fresh_interpreter(
        "import sys, beam_dpsketch as dps\n"
        "print('apache_beam' in sys.modules)\n"
        "dps.PrivacyBudget.pure(1.0)\n"
        "print('apache_beam' in sys.modules)\n"
        "dps.DPCount\n"
        "print('apache_beam' in sys.modules)\n"
    )
    # Not at import, not for a budget (the privacy layer is Beam-free), only for a transform.
    assert out.split() == ["False", "False", "True"]


# ------------------------------------------------------------------------------------------------
# Package exports
# ------------------------------------------------------------------------------------------------


def _reexported_names(package: str) -> dict[str, object]:
    module = importlib.import_module(package)
    names = getattr(module, "__all__", None)
    if names is None:
        return {}
    return {name: getattr(module, name) for name in names}


def test_no_init_reexports_a_private_name():
    for package in _packages():
        exported = _reexported_names(package)
        assert not [n for n in exported if _is_private(n)], package
        # Nor imports one under a public alias or for re-export through ``import *``.
        path = PACKAGE_DIR.parent / Path(*package.split(".")) / "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE):
                assert not [a.name for a in node.names if _is_private(a.name)], package


def test_packages_never_export_two_objects_under_one_name():
    seen: dict[str, tuple[str, object]] = {}
    for package in _packages():
        for name, value in _reexported_names(package).items():
            if name in seen:
                first, other = seen[name]
                assert other is value, f"{name}: {first} and {package} export different objects"
            else:
                seen[name] = (package, value)


def test_subpackages_export_what_users_need():
    transforms = importlib.import_module(f"{PACKAGE}.transforms")
    privacy = importlib.import_module(f"{PACKAGE}.privacy")
    sketches = importlib.import_module(f"{PACKAGE}.sketches")
    assert set(DP_TRANSFORMS) <= set(transforms.__all__)
    assert {"ReadKeyBatches", "ReadOrderedKeys", "BoundContributions", "Release"} <= set(
        transforms.__all__
    )
    assert {"PrivacyBudget", "PrivacyAccountant", "BudgetExceededError"} <= set(privacy.__all__)
    assert {"ReleasePlan", "group_privacy"} <= set(privacy.__all__)
    # Reading a Beam windowing is the transforms' business: privacy/ imports no Beam.
    assert {"plan_releases", "WindowingRefused"} <= set(transforms.__all__)
    assert {"CountMinSketch", "CountSketch", "MisraGries"} <= set(sketches.__all__)
    # Release is the transforms' release metadata; the accountant's entry type is a Charge.
    assert "Release" not in privacy.__all__ and not hasattr(privacy, "Release")
    # Internals stay importable from their modules, and only from there.
    from beam_dpsketch.transforms.combiners import SketchCombineFn
    from beam_dpsketch.transforms.release import release_id_for

    assert SketchCombineFn and release_id_for
    assert (
        "SketchCombineFn" not in transforms.__all__ and "release_id_for" not in transforms.__all__
    )


SKETCH_FAMILIES = {
    "misra_gries": {"MisraGries", "HeavyHitterRelease", "PAMGSketch", "PostProcessedSum"},
    "linear": {"CountMinSketch", "CountSketch", "PrivateCountMinSketch", "PrivateCountSketch"},
    "quantiles": {"DyadicCountSketch", "FloatDomain", "PrivateDyadicCountSketch"},
    "continual": {"GaussianBinaryMechanism", "LazySketch", "PunctualSketch"},
    "sliding": {"DPSWSketch", "PCCMG", "USketch"},
    "intermittent": {"IntermittentSketch", "UseAndKeepSketch"},
}


def test_each_sketch_family_is_one_package_exporting_its_classes():
    sketches = importlib.import_module(f"{PACKAGE}.sketches")
    # The package holds the family subpackages and no loose algorithm modules.
    loose = sorted(p.stem for p in (PACKAGE_DIR / "sketches").glob("*.py") if p.stem != "__init__")
    assert loose == []
    for family, classes in SKETCH_FAMILIES.items():
        module = importlib.import_module(f"{PACKAGE}.sketches.{family}")
        assert module.__doc__, family
        assert classes <= set(module.__all__), family
    # The top-level sketch exports are the family classes themselves.
    for name in sketches.__all__:
        owners = [
            f
            for f in SKETCH_FAMILIES
            if name in importlib.import_module(f"{PACKAGE}.sketches.{f}").__all__
        ]
        assert owners, name


# ------------------------------------------------------------------------------------------------
# Private names stay in their module
# ------------------------------------------------------------------------------------------------

# Imports of another module's private name that remain in modules this change does not own,
# as (importing module, imported module, name). Each is a follow-up: make the name public in its
# module (or move the helper to where both use it) and delete its line here.
KNOWN_PRIVATE_IMPORTS: frozenset[tuple[str, str, str]] = frozenset()


def _private_imports(
    module: str, source: str, modules: set[str], is_package: bool
) -> set[tuple[str, str, str]]:
    """``(module, imported module, name)`` for each private name ``module`` takes from another
    library module: ``from m import _x``, ``import m`` then ``m._x``, or a private submodule of
    another package (``from p import _m``)."""
    found: set[tuple[str, str, str]] = set()
    aliases: dict[str, str] = {}
    own_package = module if is_package else module.rpartition(".")[0]
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = own_package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            if base != PACKAGE and not base.startswith(f"{PACKAGE}."):
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in modules:
                    aliases[alias.asname or alias.name] = full
                    # A private submodule is private to its own package.
                    if _is_private(alias.name) and base != own_package:
                        found.add((module, base, alias.name))
                elif _is_private(alias.name) and base != module:
                    found.add((module, base, alias.name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules and alias.asname:
                    aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and _is_private(node.attr)
        ):
            found.add((module, aliases[node.value.id], node.attr))
    return found


def test_private_import_finder_sees_each_form():
    modules = {f"{PACKAGE}.a", f"{PACKAGE}.b", f"{PACKAGE}.p", f"{PACKAGE}.p._m", f"{PACKAGE}.q"}
    source = (
        f"from {PACKAGE}.b import _helper, public\n"
        f"from {PACKAGE} import b\n"
        "b._table\n"
        f"from {PACKAGE}.p import _m\n"
        "from .b import _other\n"
        "from os import _exit\n"
    )
    assert _private_imports(f"{PACKAGE}.a", source, modules, is_package=False) == {
        (f"{PACKAGE}.a", f"{PACKAGE}.b", "_helper"),
        (f"{PACKAGE}.a", f"{PACKAGE}.b", "_table"),
        (f"{PACKAGE}.a", f"{PACKAGE}.p", "_m"),
        (f"{PACKAGE}.a", f"{PACKAGE}.b", "_other"),
    }
    # A package's own private submodule is its business.
    own = f"from {PACKAGE}.p import _m\nfrom ._m import _x\n"
    assert _private_imports(f"{PACKAGE}.p.c", own, modules, is_package=False) == {
        (f"{PACKAGE}.p.c", f"{PACKAGE}.p._m", "_x")
    }


def test_no_module_imports_another_modules_private_name():
    modules = _library_modules()
    found: set[tuple[str, str, str]] = set()
    for name, path in modules.items():
        source = path.read_text(encoding="utf-8")
        found |= _private_imports(name, source, set(modules), path.name == "__init__.py")
    new = sorted(found - KNOWN_PRIVATE_IMPORTS)
    assert not new, "private names imported across modules:\n" + "\n".join(map(str, new))
