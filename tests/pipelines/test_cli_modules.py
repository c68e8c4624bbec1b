"""The command line's shared helpers live in one module per concern.

* Parsing (:mod:`~beam_dpsketch.pipelines.arguments`), the privacy and sketch-size options
  (:mod:`~beam_dpsketch.pipelines.release_arguments`), tables
  (:mod:`~beam_dpsketch.pipelines.tables`) and plots (:mod:`~beam_dpsketch.pipelines.plotting`)
  import without Apache Beam: only the input readers and the runner choice need it.
* Every public name a module of ``beam_dpsketch.pipelines`` exports is defined there, and no two
  of its modules export one object: each helper has one owner to read and to change (the
  subcommand modules each define their own ``register`` and ``run``).
"""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import beam_dpsketch.pipelines as pipelines

BEAM_FREE = (
    "beam_dpsketch.pipelines.arguments",
    "beam_dpsketch.pipelines.release_arguments",
    "beam_dpsketch.pipelines.tables",
    "beam_dpsketch.pipelines.plotting",
)


def _pipeline_modules() -> list[str]:
    return sorted(
        info.name for info in pkgutil.iter_modules(pipelines.__path__, pipelines.__name__ + ".")
    )


def test_parsing_release_options_and_tables_import_without_beam():
    # A fresh interpreter: in this one, other tests have imported Beam already.
    code = (
        "import importlib, sys\n"
        f"for name in {BEAM_FREE!r}:\n"
        "    importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'apache_beam'))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == "[]"


def test_each_exported_helper_is_defined_in_the_one_module_exporting_it():
    owners: dict[str, tuple[str, object]] = {}
    for name in _pipeline_modules():
        module = importlib.import_module(name)
        assert module.__doc__, f"{name} has no docstring stating its concern"
        for exported in getattr(module, "__all__", ()):
            obj = getattr(module, exported)
            if callable(obj) and hasattr(obj, "__module__"):
                assert obj.__module__ == name, f"{name} re-exports {exported} of {obj.__module__}"
            if exported in owners:
                owner, owned = owners[exported]
                assert obj is not owned, f"{name} re-exports {exported} of {owner}"
            else:
                owners[exported] = (name, obj)
