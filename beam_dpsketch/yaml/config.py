"""Plain YAML configuration to the library's objects: budgets, accountants, units, windowing.

A Beam YAML pipeline hands a transform its ``config:`` mapping as keyword arguments of plain
values (numbers, strings, lists, mappings). The functions here turn those values into the
objects the transforms of :mod:`beam_dpsketch.transforms` take, and check them first: every
error names the configuration key (``accountant.epsilon``, ``privacy_unit.max_contributions``)
and the offending *configuration* value, which is public (it is written in the pipeline file),
never anything read from data.

Two things live per pipeline construction, not per transform, and are kept by
:func:`shared_accountant` and :func:`insecure_test_source` in a registry keyed by the
``beam.Pipeline`` object (a weak reference, so a finished pipeline's entries go with it):

* the :class:`~beam_dpsketch.privacy.PrivacyAccountant` of an ``accountant: {name: ...}``
  mapping, so that every transform naming it charges one budget, and a pipeline that asks for
  more than it holds is refused while it is being built, before anything runs;
* the insecure test :class:`~beam_dpsketch.noise.NoiseSource` of an ``insecure_test_noise_key``,
  so that the transforms of one pipeline draw from one seeded source in the order they are
  applied, exactly as the Python API does with one ``NoiseSource.insecure_for_tests(seed)``
  handed to each of them. With it, the key that chooses which contributions of a user-level
  privacy unit are kept is public too (:func:`insecure_test_selection_key`), so that a seeded
  user-level release is reproducible as a whole.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from beam_dpsketch.checks import check_int, check_real
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyAccountant, PrivacyBudget, PrivacyUnit, Windowing

__all__ = [
    "accountant_budget",
    "budget_from_config",
    "check_field",
    "insecure_test_selection_key",
    "insecure_test_source",
    "privacy_unit_from_config",
    "shared_accountant",
    "windowing_from_config",
]

#: The keys an ``accountant:`` mapping accepts.
ACCOUNTANT_KEYS = ("name", "epsilon", "delta")
#: The keys a ``privacy_unit:`` mapping accepts (the fields of
#: :class:`~beam_dpsketch.privacy.PrivacyUnit`).
PRIVACY_UNIT_KEYS = ("id", "max_contributions", "max_windows")
#: The keys a ``windowing:`` mapping accepts (the fields of
#: :class:`~beam_dpsketch.privacy.Windowing`).
WINDOWING_KEYS = ("max_panes_per_window", "data_independent_panes", "release_range")


def _mapping(value: Any, key: str, allowed: Sequence[str]) -> dict[str, Any]:
    """``value`` as a dict after checking it is a mapping with only ``allowed`` keys."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{key} must be a mapping with keys {tuple(allowed)}, got {value!r}")
    unknown = sorted(str(k) for k in value if k not in allowed)
    if unknown:
        raise ValueError(f"{key}: unknown keys {unknown}; the keys are {tuple(allowed)}")
    return dict(value)


def _prefixed(key: str, exc: Exception) -> Exception:
    """``exc`` again, of the same type, with its message prefixed by the configuration key."""
    return type(exc)(f"{key}: {exc}")


def check_field(value: Any, key: str, *, required: bool = True) -> str | None:
    """A field name of the input rows given under ``key`` (``None`` if absent and optional)."""
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{key} must name a field of the input rows, got {value!r}")
    return value


def budget_from_config(
    epsilon: Any, delta: Any, key: str = "epsilon", delta_key: str = "delta"
) -> PrivacyBudget | None:
    """The budget ``epsilon`` (pure DP) or ``(epsilon, delta)``; ``None`` if neither is given.

    Raises
    ------
    TypeError, ValueError
        Naming ``delta_key`` for a ``delta`` without ``epsilon``, else naming the key of the
        value the budget refused.
    """
    if epsilon is None:
        if delta is not None:
            raise ValueError(f"{delta_key}: give {key} with it")
        return None
    check_real(epsilon, key, 0.0, lower_open=True)
    if delta is None:
        return PrivacyBudget.pure(float(epsilon))
    check_real(delta, delta_key, 0.0, 1.0, lower_open=True, upper_open=True)
    return PrivacyBudget.approx(float(epsilon), float(delta))


def accountant_budget(config: Any) -> tuple[str, PrivacyBudget]:
    """The name and total budget of an ``accountant: {name, epsilon, delta}`` mapping."""
    spec = _mapping(config, "accountant", ACCOUNTANT_KEYS)
    name = spec.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"accountant.name must be a non-empty string, got {name!r}")
    budget = budget_from_config(
        spec.get("epsilon"), spec.get("delta"), "accountant.epsilon", "accountant.delta"
    )
    if budget is None:
        raise ValueError("accountant.epsilon: a shared accountant needs its total budget")
    return name, budget


def privacy_unit_from_config(config: Any) -> PrivacyUnit:
    """A :class:`~beam_dpsketch.privacy.PrivacyUnit` from its mapping.

    The mapping is ``{id: <field>, max_contributions: m, max_windows: w}``.

    ``None`` (the key left out) is element level. ``id`` must be a field name: YAML has no
    callables.
    """
    if config is None:
        return PrivacyUnit()
    spec = _mapping(config, "privacy_unit", PRIVACY_UNIT_KEYS)
    if "id" in spec:
        check_field(spec["id"], "privacy_unit.id")
    try:
        return PrivacyUnit(**spec)
    except (TypeError, ValueError) as exc:
        raise _prefixed("privacy_unit", exc) from None


def windowing_from_config(config: Any) -> Windowing | None:
    """A :class:`~beam_dpsketch.privacy.Windowing` declaration from its mapping.

    ``None`` if the key is left out.

    ``release_range`` is a two-item list ``[start, end]`` of event-time seconds.
    """
    if config is None:
        return None
    spec = _mapping(config, "windowing", WINDOWING_KEYS)
    release_range = spec.get("release_range")
    if release_range is not None:
        if isinstance(release_range, str) or not isinstance(release_range, Sequence):
            raise TypeError(
                "windowing.release_range must be a list [start, end] of event-time seconds, "
                f"got {release_range!r}"
            )
        spec["release_range"] = tuple(release_range)
    try:
        return Windowing(**spec)
    except (TypeError, ValueError) as exc:
        raise _prefixed("windowing", exc) from None


# The per-pipeline registries. Keyed by the Pipeline object (weakly): one YAML file built twice
# in one process, e.g. once per runner in a test, gets two accountants, not one.
_ACCOUNTANTS: weakref.WeakKeyDictionary[Any, dict[str, PrivacyAccountant]] = (
    weakref.WeakKeyDictionary()
)
_TEST_SOURCES: weakref.WeakKeyDictionary[Any, dict[int, NoiseSource]] = weakref.WeakKeyDictionary()


def shared_accountant(pipeline: Any, config: Any) -> PrivacyAccountant:
    """The accountant named by ``config`` in ``pipeline``, created by its first transform.

    Every transform naming the accountant must state the same total budget (a YAML anchor,
    ``accountant: &etl {...}`` then ``accountant: *etl``, writes it once): a second, different
    total would make the guarantee depend on which transform was applied first.

    Raises
    ------
    ValueError
        Naming ``accountant`` when two transforms give one name different budgets.
    """
    name, budget = accountant_budget(config)
    accountants = _ACCOUNTANTS.setdefault(pipeline, {})
    accountant = accountants.get(name)
    if accountant is None:
        accountant = accountants[name] = PrivacyAccountant(budget, name=name)
    elif accountant.budget != budget:
        raise ValueError(
            f"accountant: {name!r} is declared with two budgets in one pipeline "
            f"({accountant.budget} and {budget}); give every transform that shares it the same "
            "epsilon and delta"
        )
    return accountant


def insecure_test_source(pipeline: Any, seed: Any) -> NoiseSource:
    """The seeded, INSECURE test noise source of ``seed`` in ``pipeline`` (one per seed).

    Its keys are public: for tests and demos only
    (:meth:`~beam_dpsketch.noise.NoiseSource.insecure_for_tests`).
    """
    seed = check_int(seed, "insecure_test_noise_key", lower=0)
    sources = _TEST_SOURCES.setdefault(pipeline, {})
    if seed not in sources:
        sources[seed] = NoiseSource.insecure_for_tests(seed)
    return sources[seed]


_INSECURE_SELECTION_DOMAIN = b"beam-dpsketch/yaml/insecure-test-selection-key/v1"


def insecure_test_selection_key(seed: Any) -> bytes:
    """The public contribution-selection key that goes with ``insecure_test_noise_key: seed``.

    ``SHA-256(domain + seed)``: INSECURE, for tests only, like the noise key it goes with. A
    YAML transform at user level passes it as ``selection_key`` when an insecure test key is
    configured, so the Python API reproduces its release with the same key.
    """
    seed = check_int(seed, "insecure_test_noise_key", lower=0)
    return hashlib.sha256(_INSECURE_SELECTION_DOMAIN + str(seed).encode()).digest()
