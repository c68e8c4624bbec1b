"""Load a compiled extension of the library, or its pure-Python fallback.

The library has two small C extensions, :mod:`beam_dpsketch.murmur3` (MurmurHash3 over lists of
``str``) and :mod:`beam_dpsketch.sketches.misra_gries.kernel` (the Misra-Gries update loop). Each
has a pure-Python module with the same functions, the same arguments and bit-identical results
(tested against the compiled one), so a package built where no C compiler exists still works,
only slower on those two paths:

* ``beam_dpsketch.murmur3_fallback`` for ``beam_dpsketch.murmur3``;
* ``beam_dpsketch.sketches.misra_gries.kernel_fallback`` for
  ``beam_dpsketch.sketches.misra_gries.kernel``.

The compiled module is used whenever it imports. Setting the environment variable
``BEAM_DPSKETCH_PURE_PYTHON=1`` before the library is imported forces the fallbacks (to test them,
or to rule out a miscompiled extension). Which path was taken is logged once per extension at
DEBUG level on the ``beam_dpsketch.extensions`` logger; the line names modules only.
"""

from __future__ import annotations

import importlib
import logging
import os
from types import ModuleType

__all__ = ["FORCE_PURE_PYTHON_ENV", "load_extension", "pure_python_forced"]

FORCE_PURE_PYTHON_ENV = "BEAM_DPSKETCH_PURE_PYTHON"

_LOG = logging.getLogger(__name__)


def pure_python_forced() -> bool:
    """Whether ``BEAM_DPSKETCH_PURE_PYTHON`` asks for the pure-Python fallbacks.

    Returns
    -------
    bool
        True when the variable is set to anything but empty, ``0``, ``false`` or ``no``.
    """
    value = os.environ.get(FORCE_PURE_PYTHON_ENV, "").strip().lower()
    return value not in ("", "0", "false", "no")


def load_extension(compiled: str, fallback: str) -> ModuleType:
    """The compiled module ``compiled``, or the pure-Python module ``fallback``.

    Parameters
    ----------
    compiled : str
        The dotted name of the C extension.
    fallback : str
        The dotted name of the pure-Python module with the same functions and results.

    Returns
    -------
    types.ModuleType
        ``compiled`` when it imports and the fallback is not forced, else ``fallback``. Both give
        the same results for the same arguments, so the choice changes speed, never a result.
        An error while importing ``fallback`` propagates: nothing is ever silently missing.
    """
    if pure_python_forced():
        _LOG.debug(
            "%s: pure-Python fallback %s (forced by %s)", compiled, fallback, FORCE_PURE_PYTHON_ENV
        )
        return importlib.import_module(fallback)
    try:
        module = importlib.import_module(compiled)
    except ImportError as error:
        # A wheel or sdist built without a C compiler ships no extension: the fallback computes
        # the same results. The reason names a module or file, never data.
        _LOG.debug(
            "%s: pure-Python fallback %s (compiled extension not importable: %s)",
            compiled,
            fallback,
            error,
        )
        return importlib.import_module(fallback)
    _LOG.debug("%s: compiled extension %s", compiled, getattr(module, "__file__", compiled))
    return module
