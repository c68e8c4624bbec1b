"""The base of every differentially private transform: :class:`DPTransform`.

Every DP transform of this library (``DPCount``, ``DPHistogram``, ``DPHeavyHitters``,
``DPFrequencies``, ``DPQuantiles``, ``ContinualDPSketch``, ``DPSlidingWindowFrequencies``,
``DPIntermittentQueries``, and the release step ``DPAggregate``) is a :class:`DPTransform`. The
base carries what they share, so that each states it once:

* **budget** (:class:`~beam_dpsketch.privacy.PrivacyBudget`), **budget_weight** and
  **accountant** (:class:`~beam_dpsketch.privacy.PrivacyAccountant`): by default a private
  accountant of exactly ``budget``; with a shared accountant, a transform without an explicit
  budget gets a share of the accountant's pool in proportion to its ``budget_weight`` (default
  1), the same whatever order the transforms are constructed or applied in
  (:meth:`~beam_dpsketch.privacy.PrivacyAccountant.declare`);
* the **noise source**, derived once for the transform with
  :func:`~beam_dpsketch.noise.application_source` (so two transforms never draw the same noise),
  and a warning when it is an insecure test key;
* the **run salt** (:func:`run_salt_input`): drawn when a run starts, not when the pipeline is
  built, and read by every release step as a side input, so a pipeline built once and run many
  times draws new noise in every run while a retried bundle re-draws the same noise;
* the **label**: ``label=`` is the Beam label (``PTransform.__init__(label)``), so two instances
  with different labels apply in one pipeline, and :meth:`DPTransform.default_label` is the class
  name. The *release label*, which names the accountant entry and keys every noise stream, is
  that label when one is given, else the applied transform's full label (unique in a pipeline);
* **runner check**: :meth:`DPTransform.expand` first refuses a stateful transform on a runner
  without state and timers (:mod:`~beam_dpsketch.transforms.engines`); subclasses that use
  per-key state and timers set :attr:`DPTransform.needs_state_and_timers`;
* **windowing rules**: it then judges the input's windowing, trigger and runner with
  :func:`~beam_dpsketch.transforms.windowing_rules.accept_windowing`, the one place of every
  windowing rule, from the transform's :meth:`DPTransform.windowing_declaration` and
  :meth:`DPTransform.windowing_requirement`; a refusal lists every rule broken and a
  configuration that is accepted, and the plan is kept in :attr:`DPTransform.windowing_plan`;
* **release planning**: :meth:`DPTransform.expand` names the release, calls the subclass's
  :meth:`DPTransform.plan_release` (which charges the accountant, exactly once, before anything
  runs) and then :meth:`DPTransform.expand_release`, which builds the pipeline. Nothing is
  charged at construction;
* :meth:`DPTransform.explain` (the accountant's report) and :meth:`DPTransform.display_data`
  (public parameters only: budget, mechanism, shape, neighbouring relation; never data).

Constructor convention
----------------------
Required shape parameters come first and positionally (``k``; ``width, depth``; ``quantiles,
lower, upper``; ``window, width, depth``), then ``budget`` (optional when an ``accountant`` is given:
the transform then shares the accountant's pool by ``budget_weight``); every other parameter is
keyword-only.
The same names mean the same things in every transform:

``budget``
    The transform's total :class:`~beam_dpsketch.privacy.PrivacyBudget` for one privacy unit.
``budget_weight``
    With a shared ``accountant`` and no ``budget``: the transform's weight in the accountant's
    pool (default 1).
``accountant``
    A shared :class:`~beam_dpsketch.privacy.PrivacyAccountant` to charge.
``noise_source``
    The secret :class:`~beam_dpsketch.noise.NoiseSource` (default: a fresh ``os.urandom`` key).
``label``
    The Beam label, which also names the release.
``with_metadata``
    Emit release records with their public metadata instead of the bare answers.
``width``, ``depth``, ``seed``
    Shape and public hash seed of a Count-Min / Count Sketch.
``sketch``
    ``"count-min"`` or ``"count-sketch"`` (and ``algorithm="lazy" | "punctual"`` for continual
    observation).
``release_every``
    A public release schedule: release after every ``release_every`` steps.
``key_fn``, ``value_fn``, ``weight_fn``, ``time_fn``, ``position_fn``, ``privacy_id_fn``
    Extractors: a callable of the element, or the name of a field of a ``dict`` or ``beam.Row``
    element (:func:`as_extractor`).
``privacy_unit``
    Whom the guarantee protects: a :class:`~beam_dpsketch.privacy.PrivacyUnit` (element level
    by default; user level with an ``id`` and its bounds).
``windowing``
    The declared bounds of the input's windowing: a :class:`~beam_dpsketch.privacy.Windowing`
    (``max_panes_per_window``, ``data_independent_panes``, ``release_range``).
``query_keys``
    Public keys whose estimates every release carries; ``queries`` is reserved for a declared
    query schedule (:class:`~beam_dpsketch.transforms.intermittent.QuerySchedule`).
"""

from __future__ import annotations

import abc
import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any

import apache_beam as beam
from apache_beam.transforms.display import DisplayDataItem
from apache_beam.typehints import native_type_compatibility, typehints

from beam_dpsketch.checks import check_real
from beam_dpsketch.noise import NoiseSource, application_source, new_run_salt
from beam_dpsketch.privacy.accountant import BudgetExceededError, Charge, PrivacyAccountant
from beam_dpsketch.privacy.budget import PrivacyBudget
from beam_dpsketch.privacy.shares import budget_of_usage
from beam_dpsketch.privacy.windowing import ReleasePlan
from beam_dpsketch.transforms.engines import check_runner
from beam_dpsketch.transforms.records import WINDOWED_TYPES, add_window_bounds
from beam_dpsketch.transforms.windowing_rules import (
    ANY_WINDOWING,
    WindowingDeclaration,
    WindowingRequirement,
    accept_windowing,
    has_window_bounds,
)

__all__ = [
    "DPTransform",
    "FieldExtractor",
    "applied_label",
    "as_extractor",
    "check_label",
    "remaining_budget",
    "run_salt_input",
    "same_windowing",
    "with_run_salt",
]

_LOG = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------
# Extractors
# --------------------------------------------------------------------------------------------


class FieldExtractor:
    """Read one named field of an element: a ``dict`` (any mapping) or a ``beam.Row``.

    Picklable (it travels to the workers). A missing field raises ``KeyError`` naming the
    extractor parameter, the field and the element's type, never an element's value.

    Parameters
    ----------
    field
        The field name.
    parameter
        The extractor parameter it was given as (for error messages), e.g. ``"key_fn"``.
    """

    __slots__ = ("field", "parameter")

    def __init__(self, field: str, parameter: str = "extractor") -> None:
        if not isinstance(field, str) or not field:
            raise ValueError(f"{parameter}: a field name must be a non-empty string")
        self.field = field
        self.parameter = parameter

    def __call__(self, element: Any) -> Any:
        if isinstance(element, Mapping):
            try:
                return element[self.field]
            except KeyError:
                pass
        else:
            try:
                return getattr(element, self.field)
            except AttributeError:
                pass
        # Names the field and the element's type only: the element itself is data.
        raise KeyError(
            f"{self.parameter}: an element of type {type(element).__name__!r} has no field "
            f"{self.field!r}"
        )

    def __getstate__(self) -> tuple[str, str]:
        return (self.field, self.parameter)

    def __setstate__(self, state: tuple[str, str]) -> None:
        self.field, self.parameter = state

    def __repr__(self) -> str:
        return f"FieldExtractor({self.field!r})"


def same_windowing(windowing: Any) -> beam.WindowInto:
    """A ``WindowInto`` that gives a public side input (heartbeats) the windowing ``windowing``.

    Flattening with the data needs identical window function, trigger, accumulation mode,
    timestamp combiner and allowed lateness.
    """
    return beam.WindowInto(
        windowing.windowfn,
        trigger=windowing.triggerfn,
        accumulation_mode=windowing.accumulation_mode,
        timestamp_combiner=windowing.timestamp_combiner,
        allowed_lateness=windowing.allowed_lateness,
    )


def as_extractor(fn: Any, parameter: str) -> Callable[[Any], Any] | None:
    """An extractor parameter as a callable: ``None``, a callable, or a field name.

    Parameters
    ----------
    fn
        ``None`` (the transform's default), a callable of one element, or the name (``str``) of
        a field of ``dict`` or ``beam.Row`` elements (read by :class:`FieldExtractor`).
    parameter
        The parameter's name, for error messages (``"key_fn"``, ``"value_fn"``, ...).

    Raises
    ------
    TypeError
        If ``fn`` is neither ``None``, a callable nor a string.
    """
    if fn is None or isinstance(fn, FieldExtractor):
        return fn
    if isinstance(fn, str):
        return FieldExtractor(fn, parameter)
    if callable(fn):
        return fn
    raise TypeError(
        f"{parameter} must be a callable, a field name (str) or None, got {type(fn).__name__}"
    )


# --------------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------------


def check_label(label: Any) -> str | None:
    """``label`` if it is ``None`` or a non-empty string; else ``ValueError`` naming ``label``."""
    if label is not None and (not isinstance(label, str) or not label.strip()):
        raise ValueError(f"label must be a non-empty string or None, got {label!r}")
    return label


def applied_label(pcoll: beam.PCollection, fallback: str) -> str:
    """Full label of the transform being expanded on ``pcoll`` (unique in a pipeline).

    ``fallback`` if the pipeline does not say (it always does while a transform expands).
    """
    try:
        # Beam has no public accessor; the applied transform is on top of this stack while its
        # expand() runs. The full label keeps the releases of same-named transforms apart.
        return str(pcoll.pipeline._current_transform().full_label) or fallback
    except Exception:  # pragma: no cover - defensive: fall back to the short label
        return fallback


def _draw_run_salt(_seed: None, noise_source: NoiseSource) -> bytes:
    return new_run_salt(noise_source)


def run_salt_input(pcoll: beam.PCollection, noise_source: NoiseSource) -> beam.pvalue.AsSingleton:
    """The run salt of one transform application, as a singleton side input for its releases.

    Adds ``Create([None]) -> Map(new_run_salt)`` (labels ``RunSalt`` and ``DrawRunSalt``, in the
    scope of the transform being expanded) to ``pcoll``'s pipeline; ``Create`` rather than a bare
    ``Impulse``, which the DaskRunner does not evaluate. The salt is drawn on a worker
    when the run executes, not when the pipeline is built: a pipeline constructed once and
    launched many times (a staged template, a pipeline a scheduler keeps) gets a new salt in
    every run. A runner materialises a side input once per run before any consumer reads it,
    so every bundle of a release step, and every retry of one, reads the same salt.

    A release step derives its noise source as ``noise_source.for_run(salt)``
    (:meth:`~beam_dpsketch.noise.NoiseSource.for_run`, cached per salt). The salt is in the
    global window; Beam maps every main-input window to it. For an insecure test source the
    salt is a fixed public constant, so seeded runs reproduce
    (:func:`~beam_dpsketch.noise.new_run_salt`).

    Parameters
    ----------
    pcoll
        The input of the transform being expanded (only its pipeline is used).
    noise_source
        The transform application's noise source.
    """
    salt = (
        pcoll.pipeline
        | "RunSalt" >> beam.Create([None])
        | "DrawRunSalt" >> beam.Map(_draw_run_salt, noise_source).with_output_types(bytes)
    )
    return beam.pvalue.AsSingleton(salt)


def _attach_salt(element: tuple[Any, Any], salt: bytes) -> tuple[Any, tuple[bytes, Any]]:
    key, value = element
    return key, (salt, value)


def with_run_salt(keyed: beam.PCollection, run_salt: beam.pvalue.AsSingleton) -> beam.PCollection:
    """``(key, value)`` pairs as ``(key, (salt, value))``: the run salt for a stateful step.

    A stateful ``DoFn`` reads the run salt from its elements, not as a side input: Beam's
    Python SDK (2.77) picks the coder of a stateful ``ParDo``'s timer keys from an arbitrary
    one of its inputs when it has side inputs (sometimes the salt's), and timer callbacks
    receive no side inputs. The salt is the same for every element of a run; a step with
    timers keeps it in state for them. It costs 16 bytes per element; the stateful steps of
    this library receive pre-aggregated elements (summaries, segment tables, batches).

    The key type hint of ``keyed`` is kept, so the state key coder stays deterministic.
    Adds the step ``WithRunSalt`` in the scope of the transform being expanded.
    """
    hint = native_type_compatibility.convert_to_beam_type(keyed.element_type)
    key_type: Any = Any
    value_type: Any = Any
    if isinstance(hint, typehints.TupleConstraint) and len(hint.tuple_types) == 2:
        key_type, value_type = hint.tuple_types
    out_type = typehints.KV[key_type, typehints.Tuple[bytes, value_type]]
    return keyed | "WithRunSalt" >> beam.Map(_attach_salt, run_salt).with_output_types(out_type)


def remaining_budget(accountant: PrivacyAccountant, name: str) -> PrivacyBudget:
    """What ``accountant`` has left, as a budget of its kind, for the transform ``name``.

    Raises
    ------
    BudgetExceededError
        If nothing is left.
    """
    left = budget_of_usage(accountant.remaining, accountant.budget)
    if left is None:
        raise BudgetExceededError(
            name,
            accountant.name,
            accountant.committed,
            "the rest of the budget, but nothing is left",
            accountant.budget,
            None,
        )
    return left


# --------------------------------------------------------------------------------------------
# The base class
# --------------------------------------------------------------------------------------------


def _declaring_init(init: Callable[..., None]) -> Callable[..., None]:
    """``init`` followed, for the outermost constructor only, by :meth:`DPTransform.declare_share`."""

    @functools.wraps(init)
    def __init__(self: DPTransform, *args: Any, **kwargs: Any) -> None:
        outermost = "_constructing" not in self.__dict__
        if outermost:
            self.__dict__["_constructing"] = True
        try:
            init(self, *args, **kwargs)
        finally:
            if outermost:
                del self.__dict__["_constructing"]
        if outermost:
            self.declare_share()

    return __init__


class DPTransform(beam.PTransform, abc.ABC):
    """Base of every differentially private transform (see the module docstring).

    Subclasses call ``super().__init__(budget, accountant=..., noise_source=..., label=...)``
    and implement :meth:`plan_release` (validate the input, charge the accountant once, return
    the charge) and :meth:`expand_release` (build the pipeline). They override
    :meth:`display_parameters` to show their public parameters.

    Parameters
    ----------
    budget
        The transform's total budget for one privacy unit. ``None`` (with an ``accountant``):
        a share of the accountant's pool, by ``budget_weight``.
    budget_weight
        Only without ``budget``: the transform's weight (a real > 0; default 1) in the pool of
        ``accountant``. The pool is the accountant's budget minus what was recorded on it before
        the first transform declared on it was applied, minus every explicit ``budget`` of the
        transforms declared on it by then; each weighted transform gets ``pool * weight /
        (sum of weights)``. Every transform declares itself on its accountant when constructed,
        and the pool is frozen when the first of them is applied (its first charge), so the
        shares, and hence every release, are the same whatever order the transforms are
        constructed or applied in. A weighted transform constructed after that is refused:
        construct every transform that shares an accountant before applying any.
    accountant
        Shared accountant to charge; default: a private one of exactly ``budget``.
    noise_source
        Secret noise key; default ``NoiseSource()`` (``os.urandom``). The transform derives its
        own key from it once, here (:func:`~beam_dpsketch.noise.application_source`); the derived
        source travels pickled to the workers. Each run then salts it with a value drawn when the
        run starts (:attr:`run_salt`), so two runs never share noise and a retried bundle
        re-draws the same noise.
    label
        Beam label of the transform, and the name of its release (accountant entry, noise ids).
        Default: the class name as Beam label, and the applied full label as release name.

    Raises
    ------
    TypeError, ValueError
        For a budget or accountant of the wrong type, neither of them given, an empty label, a
        ``budget_weight`` given with a ``budget`` or without an ``accountant``, or a weighted
        transform constructed after its accountant's pool was frozen.

    Notes
    -----
    **Privacy guarantee.** The base adds no release of its own; every subclass states its
    guarantee. The base ensures that each application charges the accountant exactly once,
    before anything runs (an over-budget configuration raises
    :class:`~beam_dpsketch.privacy.BudgetExceededError` at pipeline construction), and that two
    releases never share a label on one accountant (they would share noise).
    """

    #: Whether the transform keeps per-key state or sets timers (a stateful ``DoFn``). A runner
    #: without state and timers (:mod:`~beam_dpsketch.transforms.engines`) refuses it when it
    #: is applied. A subclass whose need depends on its parameters sets it per instance.
    needs_state_and_timers: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            cls.__init__ = _declaring_init(cls.__dict__["__init__"])  # type: ignore[method-assign]

    def declare_share(self) -> None:
        """Declare this transform on its accountant: its explicit budget, or its weight.

        Called once, when the outermost constructor returns, so that every transform constructed
        on an accountant is declared before any of them is applied (and charges), and a
        transform whose constructor raised is not declared at all.
        """
        if self._share_token is None:
            self._share_token = self._accountant.declare(
                self._label_arg or type(self).__name__,
                budget=self._budget,
                weight=self._budget_weight,
            )

    def __init__(
        self,
        budget: PrivacyBudget | None = None,
        *,
        accountant: PrivacyAccountant | None = None,
        noise_source: NoiseSource | None = None,
        label: str | None = None,
        budget_weight: float | None = None,
    ) -> None:
        super().__init__(check_label(label))
        if budget is not None and not isinstance(budget, PrivacyBudget):
            raise TypeError(f"budget must be a PrivacyBudget or None, got {type(budget).__name__}")
        if accountant is not None and not isinstance(accountant, PrivacyAccountant):
            raise TypeError(
                f"accountant must be a PrivacyAccountant or None, got {type(accountant).__name__}"
            )
        if budget_weight is not None:
            if budget is not None:
                raise ValueError(
                    "budget_weight: give either budget= (an explicit budget) or budget_weight= "
                    "(a share of a shared accountant's pool), not both"
                )
            if accountant is None:
                raise ValueError(
                    "budget_weight: a weight shares the pool of a shared accountant: pass "
                    "accountant=PrivacyAccountant(...), or give budget= instead"
                )
            budget_weight = check_real(budget_weight, "budget_weight", 0.0, lower_open=True)
        if budget is None and accountant is None:
            raise ValueError("budget: pass a PrivacyBudget, an accountant, or both")
        self._budget = budget
        self._budget_weight = None if budget is not None else (budget_weight or 1.0)
        self._label_arg = label
        self._noise_source = application_source(noise_source)
        if self._noise_source.is_insecure:
            _LOG.warning(
                "%s uses an INSECURE test noise key: its releases are not private",
                label or type(self).__name__,
            )
        if accountant is None:
            # Named after the transform so that explain() reads well.
            accountant = PrivacyAccountant(budget, name=label or type(self).__name__)  # type: ignore[arg-type]
        self._accountant = accountant
        # Declared on the accountant once the whole constructor has succeeded
        # (__init_subclass__): a transform whose construction fails claims no share.
        self._share_token: int | None = None
        # Set when applied (the last application's, for an instance applied more than once).
        self.charge: Charge | None = None
        self.release_label: str | None = None
        #: The run salt side input of the application being expanded (:func:`run_salt_input`);
        #: every step of :meth:`expand_release` that draws noise takes it.
        self.run_salt: beam.pvalue.AsSingleton | None = None
        #: The release plan of the input's windowing, once applied (``None`` for a transform
        #: without a :meth:`windowing_declaration`).
        self.windowing_plan: ReleasePlan | None = None

    # -- Beam -------------------------------------------------------------------------------

    def default_label(self) -> str:
        """Beam's label when none is given: the class name and the shape, ``DPHeavyHitters(route)``.

        The part in parentheses is :meth:`label_detail` (a field name read by an extractor, else
        a short public parameter); it is omitted when there is none. When no ``label`` is given
        the full applied label is also the release's name, so it is part of the noise's release
        id.
        """
        detail = self.label_detail()
        name = type(self).__name__
        return name if detail is None else f"{name}({detail})"

    def label_detail(self) -> str | None:
        """What :meth:`default_label` shows in parentheses: public parameters only.

        By default the field name of the first extractor given as a field name (``key_fn="route"``
        shows ``route``); subclasses fall back to a short distinguishing parameter.
        """
        for fn in self.label_extractors():
            if isinstance(fn, FieldExtractor):
                return fn.field
        return None

    def label_extractors(self) -> tuple[Any, ...]:
        """The extractors whose field name :meth:`label_detail` shows, most telling first."""
        return ()

    def output_type(self) -> Any:
        """The type of every element the transform emits (see :mod:`~beam_dpsketch.transforms.records`).

        Declared on the output PCollection when the transform is applied, so downstream coders,
        ``beam.Row`` consumers and DataFrames see it. ``Any`` by default.
        """
        return Any

    def display_data(self) -> dict[str, Any]:
        """Public parameters for runner UIs: budget, accountant, mechanism, shape, relation.

        Never data: every item is a constructor parameter or a calibration derived from them.
        """
        budget = (
            str(self._budget)
            if self._budget is not None
            else f"weight {self._budget_weight:g} of accountant {self._accountant.name!r}'s pool"
        )
        items: dict[str, Any] = {
            "budget": DisplayDataItem(budget, label="Privacy budget"),
            "accountant": DisplayDataItem(self._accountant.name, label="Privacy accountant"),
        }
        if self._label_arg is not None:
            items["release_label"] = DisplayDataItem(self._label_arg, label="Release label")
        for key, value in self.display_parameters().items():
            if value is None:
                continue
            if not isinstance(value, bool | int | float | str):
                value = str(value)
            items[key] = DisplayDataItem(value, label=key.replace("_", " ").capitalize())
        return items

    def display_parameters(self) -> dict[str, Any]:
        """Public parameters shown by :meth:`display_data` (subclasses extend it).

        Only parameters and calibrations derived from them: never anything read from data.
        """
        return {}

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        name = self.release_name(pcoll)
        # Before planning: a refused transform must charge nothing.
        runner = check_runner(self, pcoll, name)
        self.windowing_plan = accept_windowing(
            self.judged_windowing(pcoll),
            self.windowing_declaration(),
            name=name,
            kind=type(self).__name__,
            requirement=self.windowing_requirement(),
            runner=runner,
        )
        charge = self.plan_release(pcoll, name)
        if not isinstance(charge, Charge):
            raise TypeError(
                f"{type(self).__name__}.plan_release must charge the accountant and return the "
                f"Charge, got {type(charge).__name__}"
            )
        self.charge = charge
        self.release_label = name
        self.run_salt = run_salt_input(pcoll, self._noise_source)
        # Beam sets a composite's declared output type on its result once expand returns.
        self.with_output_types(self.output_type())
        released = self.expand_release(pcoll)
        row_type = self.output_type()
        if row_type not in WINDOWED_TYPES or not has_window_bounds(released):
            return released
        # Rows released per window carry the window's public bounds and their pane, so that
        # readers outside Beam (a DataFrame, a file) can tell two windows' rows apart.
        self.with_output_types(WINDOWED_TYPES[row_type])
        return add_window_bounds(released, row_type)

    # -- Hooks ------------------------------------------------------------------------------

    def windowing_declaration(self) -> WindowingDeclaration | None:
        """The windowing bounds the user declared (``max_panes_per_window``, ...).

        ``None`` (the default) for a transform whose releases are not one per window and pane:
        the windowing rules are checked, but no plan is made.
        """
        return None

    def windowing_requirement(self) -> WindowingRequirement:
        """What this transform's mechanism needs of the input's windowing (default: nothing
        beyond the general rules of :mod:`~beam_dpsketch.transforms.windowing_rules`)."""
        return ANY_WINDOWING

    def judged_windowing(self, pcoll: beam.PCollection) -> Any:
        """The windowing strategy the release plan is read from (default: the input's)."""
        return pcoll.windowing

    @abc.abstractmethod
    def plan_release(self, pcoll: beam.PCollection, name: str) -> Charge:
        """Validate the input and charge the accountant once for release ``name``.

        Runs at pipeline construction, before anything runs. Subclasses resolve their budget
        with :meth:`budget_for`, check the label with :meth:`check_label_free` and return the
        charge.
        """

    @abc.abstractmethod
    def expand_release(self, pcoll: beam.PCollection) -> beam.PCollection:
        """Build the pipeline of the release planned by :meth:`plan_release`.

        Every step that draws noise takes :attr:`run_salt` as a side input and draws from
        ``noise_source.for_run(salt)``, never from :attr:`noise_source` itself.
        """

    # -- Helpers for subclasses ---------------------------------------------------------------

    def release_name(self, pcoll: beam.PCollection) -> str:
        """The release label: ``label`` if given, else the applied full label."""
        return self._label_arg or applied_label(pcoll, self.label)

    def check_label_free(self, name: str) -> None:
        """``ValueError`` if the accountant already has a charge for release ``name``.

        Two releases with one label and one noise key would add *identical* noise, and the
        difference of their outputs would be exact.
        """
        accountant = self._accountant
        if any(c.transform == name for _, c in accountant.all_charges()):
            raise ValueError(
                f"{name}: accountant {accountant.name!r} already has a charge for this label; "
                "give every DP transform its own label"
            )

    def budget_for(self, name: str) -> PrivacyBudget:
        """The budget of release ``name``: ``budget``, else its weighted share of the pool.

        Raises
        ------
        BudgetExceededError
            For a weighted transform when the accountant's pool is empty.
        """
        self.declare_share()
        return self._accountant.share_of(self._share_token, name)  # type: ignore[arg-type]

    # -- Public surface ---------------------------------------------------------------------

    @property
    def budget(self) -> PrivacyBudget | None:
        """The transform's explicit budget (``None``: a weighted share of the accountant's pool)."""
        return self._budget

    @property
    def budget_weight(self) -> float | None:
        """The transform's weight in its accountant's pool (``None`` with an explicit budget)."""
        return self._budget_weight

    @property
    def accountant(self) -> PrivacyAccountant:
        """The accountant this transform charges."""
        return self._accountant

    @property
    def noise_source(self) -> NoiseSource:
        """This transform application's noise source (its key is never shown).

        Releases draw from ``noise_source.for_run(salt)`` with the salt of their run, so with a
        secret key this source alone does not determine any release's noise; with an insecure
        test source ``for_run`` returns the source itself, and seeded tests can recompute the
        noise of a release from it.
        """
        return self._noise_source

    def explain(self) -> str:
        """The accountant's report, including this transform's charge.

        The report holds public facts only (parameters, calibrations, costs).

        Raises
        ------
        RuntimeError
            If the transform has not been applied yet: its cost can depend on the input's
            windowing, and it charges only when applied.
        """
        if self.charge is None:
            raise RuntimeError(
                "explain() is available once the transform is applied to a PCollection: its "
                "cost depends on the input's windowing"
            )
        return self._accountant.explain()
