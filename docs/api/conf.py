"""Sphinx configuration of the API reference (``make docs``).

The reference renders the numpy docstrings of the public API (``import beam_dpsketch as dps``
and the names each subpackage exports). The build runs nitpicky with warnings as errors, so a
reference that does not resolve fails it. The machines that build it reach package registries
only, not the web, so no intersphinx inventories are loaded: references to third-party types
(Apache Beam, numpy, pyarrow) are listed in ``nitpick_ignore_regex`` instead.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import sys
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import beam_dpsketch  # noqa: E402  (after the path above, for an uninstalled checkout)

project = "beam-dpsketch"
author = "beam-dpsketch developers"
copyright = "beam-dpsketch developers"

extensions = ["sphinx.ext.autodoc", "numpydoc"]

nitpicky = True
root_doc = "index"
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_title = "beam-dpsketch API reference"

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"show-inheritance": True}
# Methods that only override Beam's (CombineFn, DoFn, PTransform) keep Beam's documentation,
# which is not written for this renderer: a member is rendered when it has its own docstring.
autodoc_inherit_docstrings = False
# Docstrings name classes without their module; resolve them in the current module first.
add_module_names = False
# The class pages list their members through autodoc; numpydoc renders the sections only.
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = False

# Third-party and standard-library types that docstrings and signatures name. Without
# intersphinx nothing can link them; every other unresolved reference fails the build.
nitpick_ignore_regex = [
    (
        r"py:.*",
        r"(apache_beam|beam|pyarrow|pa|numpy|np|npt|cryptography|mmh3|dask|distributed)(\..*)?",
    ),
    (r"py:.*", r"(typing|collections\.abc|collections|os|pathlib|datetime|enum|types)\..*"),
    (r"py:.*", r"(abc|argparse|fractions|math|logging|io|json|threading)\..*"),
    # Private names are not part of the reference (a signature may still name one).
    (r"py:.*", r"(.*\.)?_[A-Za-z]\w*(\..*)?"),
    (r"py:.*", r"(Path|PathLike|Callable|Iterable|Iterator|Mapping|Sequence|Hashable|Any)"),
    (r"py:.*", r"(ndarray|ArrayLike|DTypeLike|PCollection|PTransform|PBegin|DoFn|CombineFn)"),
]

# The pages of the reference, generated from the packages' ``__all__`` so that every exported
# name is rendered exactly once: a name ``dps`` exports is documented as ``beam_dpsketch.X``,
# the other exports under the subpackage that exports them.
PAGES: list[tuple[str, str, str, str]] = [
    # (file, title, module, text before the members)
    ("transforms", "Transforms, readers and release types", "beam_dpsketch.transforms", ""),
    ("privacy", "Budgets, accounting and release planning", "beam_dpsketch.privacy", ""),
    ("sketches", "Sketches (pure numpy)", "beam_dpsketch.sketches", ""),
    ("noise", "Noise sources and samplers", "beam_dpsketch.noise", ""),
    ("hashing", "Key encoding and hashing", "beam_dpsketch.hashing", ""),
    ("serialization", "Serialization format", "beam_dpsketch.serialization", ""),
    ("checks", "Parameter checks", "beam_dpsketch.checks", ""),
]

# Modules whose docstrings are rendered on the "Modules" page, so that ``:mod:`` references
# resolve. The paper-reproduction harness is not part of the library's API.
MODULES_SKIPPED = ("beam_dpsketch.evaluation",)

GENERATED = Path(__file__).resolve().parent / "generated"


def _exports(module: str) -> list[str]:
    """The names ``module`` exports through ``__all__``."""
    return [n for n in importlib.import_module(module).__all__ if not n.startswith("__")]


def _write(path: Path, text: str) -> None:
    """Write ``text`` unless the file already holds it (an unchanged file is not rebuilt)."""
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def _public_bases(obj: Any) -> list[str] | None:
    """Names of a class's public ancestors when it derives from a private one, else None.

    Members a class inherits from a private base (``_PrivateLinearSketch.release``) are part
    of that class's API, so they are rendered on it; members of its public ancestors are
    rendered on those (or are Beam's and numpy's).
    """
    if not isinstance(obj, type):
        return None
    ancestors = obj.__mro__[1:]
    if not any(c.__name__.startswith("_") for c in ancestors):
        return None
    return [c.__name__ for c in ancestors if not c.__name__.startswith("_")]


def _is_data(obj: Any) -> bool:
    """Whether ``obj`` is a constant (not a module, class, function or other callable)."""
    return not (isinstance(obj, types.ModuleType | type) or callable(obj))


def _automodule(module: str, members: list[str]) -> str:
    """Directives rendering ``members`` of ``module`` (in the order given).

    Members without a docstring are rendered too (signature only), so that a docstring may
    name any public attribute or constant.
    """
    if not members:
        return f".. automodule:: {module}\n   :no-members:\n"
    loaded = importlib.import_module(module)
    plain = [
        m
        for m in members
        if _public_bases(getattr(loaded, m)) is None and not _is_data(getattr(loaded, m))
    ]
    text = f".. automodule:: {module}\n"
    text += (
        f"   :members: {', '.join(plain)}\n   :undoc-members:\n" if plain else "   :no-members:\n"
    )
    for name in members:
        if _is_data(getattr(loaded, name)):
            # ``automodule`` skips a constant without a doc comment; ``autodata`` shows its value.
            text += f"\n.. autodata:: {module}.{name}\n"
            continue
        stop = _public_bases(getattr(loaded, name))
        if stop is not None:
            text += (
                f"\n.. autoclass:: {module}.{name}\n   :members:\n   :undoc-members:\n"
                f"   :inherited-members: {', '.join(stop)}\n"
            )
    return text


def generate_pages(app: Any) -> None:
    """Write the API pages into ``generated/`` before Sphinx reads its sources."""
    GENERATED.mkdir(exist_ok=True)
    top = set(_exports("beam_dpsketch"))
    documented = {"beam_dpsketch", *(page[2] for page in PAGES)}
    for name, title, module, intro in PAGES:
        members = [m for m in _exports(module) if m not in top]
        text = f"{title}\n{'=' * len(title)}\n\n{intro}{_automodule(module, members)}"
        _write(GENERATED / f"{name}.rst", text)
    title = "The public API: ``import beam_dpsketch as dps``"
    _write(
        GENERATED / "top.rst",
        f"{title}\n{'=' * len(title)}\n\n"
        + _automodule("beam_dpsketch", sorted(top, key=_exports("beam_dpsketch").index)),
    )
    modules = sorted(
        info.name
        for info in pkgutil.walk_packages(beam_dpsketch.__path__, "beam_dpsketch.")
        if not info.name.startswith(MODULES_SKIPPED) and info.name not in documented
    )
    # An object an exporting page renders is not rendered again under its defining module.
    exported = {
        _definition(getattr(importlib.import_module(module), name))
        for module in documented
        for name in _exports(module)
    }
    sections = []
    for module in modules:
        members = [
            name
            for name in _defined_names(module)
            if _definition(getattr(importlib.import_module(module), name)) not in exported - {None}
        ]
        sections.append(
            f"``{module}``\n{'-' * (len(module) + 4)}\n\n{_automodule(module, members)}"
        )
    title = "Modules"
    _write(
        GENERATED / "modules.rst",
        f"{title}\n{'=' * len(title)}\n\n"
        "Every module of the library, with the public names it defines that the pages above do\n"
        "not already show.\n\n" + "\n".join(sections),
    )


def _defined_names(module: str) -> list[str]:
    """Public names that ``module``'s own source binds at top level, in source order."""
    source = importlib.import_module(module).__file__
    if source is None or not source.endswith(".py"):
        return []
    names: list[str] = []
    for node in ast.parse(Path(source).read_text()).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.append(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return [n for n in dict.fromkeys(names) if not n.startswith("_")]


def _definition(obj: Any) -> str | None:
    """Where ``obj`` is defined (``module.qualname``, or a module's name), else None."""
    if isinstance(obj, property):
        obj = obj.fget
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if isinstance(module, str) and isinstance(qualname, str):
        return f"{module}.{qualname}"
    return None


def _import(dotted: str) -> Any:
    """The object a dotted path names (a module, then attributes), else None."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


_DOCUMENTED_BY_DEFINITION: dict[str, str] = {}


def resolve_by_definition(app: Any, env: Any, node: Any, contnode: Any) -> Any:
    """Resolve a Python reference that names a documented object by another path.

    Docstrings name an object where it is defined (``beam_dpsketch.privacy.budget.
    PrivacyBudget``) or by its bare name from inside a module that does not export it; the
    reference documents it where users import it (``beam_dpsketch.PrivacyBudget``). A reference
    resolves when the path it names is the same Python object as a documented one; anything
    else stays unresolved and fails the build.
    """
    if node.get("refdomain") != "py":
        return None
    domain = env.get_domain("py")
    if not _DOCUMENTED_BY_DEFINITION:
        for name in domain.objects:
            where = _definition(_import(name))
            if where is not None:
                _DOCUMENTED_BY_DEFINITION.setdefault(where, name)
    target = node["reftarget"].lstrip(".~")
    module, cls = node.get("py:module"), node.get("py:class")
    # The target as written, then relative to the class, the module and each package above it.
    scopes = [target]
    if module:
        parts = module.split(".")
        scopes += [f"{module}.{cls}.{target}"] if cls else []
        scopes += [".".join([*parts[:cut], target]) for cut in range(len(parts), 0, -1)]
    for path in scopes:
        where = _definition(_import(path))
        name = _DOCUMENTED_BY_DEFINITION.get(where) if where else None
        if name is not None:
            return domain.resolve_xref(
                env, node["refdoc"], app.builder, node["reftype"], name, node, contnode
            )
    # A name rendered away from its module (``ContinualRelease`` in the docstring of
    # ``beam_dpsketch.ContinualDPSketch``), or a constant a package re-exports from a submodule
    # (``beam_dpsketch.sketches.misra_gries.DEFAULT_K``): the one documented object of that
    # kind whose name ends so (and lies inside the named package). Aliases are the
    # defining-module names autodoc records for an object it renders elsewhere.
    kinds = set(domain.objtypes_for_role(node["reftype"]) or ())
    package, _, last = target.rpartition(".")
    matches = {
        name
        for name, entry in domain.objects.items()
        if not entry.aliased
        and entry.objtype in kinds
        and (
            name == target
            or name.endswith(f".{target}")
            or (package and name.startswith(f"{package}.") and name.endswith(f".{last}"))
        )
    }
    if len(matches) == 1:
        return domain.resolve_xref(
            env, node["refdoc"], app.builder, node["reftype"], matches.pop(), node, contnode
        )
    return None


def public_bases(app: Any, name: str, obj: Any, options: Any, bases: list[type]) -> None:
    """Show a class's public ancestors in place of a private base class it derives from."""
    shown: list[type] = []
    pending = list(bases)
    while pending:
        base = pending.pop(0)
        if base.__name__.startswith("_"):
            pending[:0] = [b for b in base.__bases__ if b is not object]
        elif base not in shown:
            shown.append(base)
    bases[:] = shown or [object]


def setup(app: Any) -> dict[str, Any]:
    """Generate the pages when the builder starts; resolve references by definition."""
    app.connect("builder-inited", generate_pages)
    app.connect("autodoc-process-bases", public_bases)
    app.connect("missing-reference", resolve_by_definition)
    return {"parallel_read_safe": True}
