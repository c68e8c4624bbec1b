"""The DP transforms as Beam YAML sees them: plain configuration in, schema'd rows out.

Each class here is a thin ``PTransform`` that Beam YAML's ``python`` provider constructs from a
transform's ``config:`` mapping (keyword arguments of plain values). When it is applied it builds
the library transform of the same name (:mod:`beam_dpsketch.transforms`) with the objects of
:mod:`beam_dpsketch.yaml.config`, applies it, and turns each released record into a
``beam.Row`` with a fixed schema, adding the release's window (``window_start``,
``window_end``, ``pane_index``: the library's
:data:`~beam_dpsketch.transforms.records.WINDOW_FIELDS`, as
:class:`~beam_dpsketch.transforms.records.WithWindowBounds` adds them) when the input is
windowed. The step keeps its own conversion because its rows are typed from the input's
schema (``key`` has the type of the key field) and its estimates are floats for every
mechanism, where the library's rows keep keys of any type and integer estimates. The privacy guarantee is the library
transform's, unchanged: the conversion reads only released values and the public window of the
release, so it is post-processing.

Common configuration keys (every transform):

``epsilon``, ``delta``
    The transform's own budget: ``epsilon``-DP, or ``(epsilon, delta)``-DP with ``delta``.
``accountant``
    ``{name, epsilon, delta}``: a budget shared by every transform of the pipeline that names
    it. Each transform then still states its own ``epsilon`` (and ``delta``), charged to the
    shared budget; a pipeline whose transforms ask for more than it holds is refused while it
    is built, before anything runs, and the accountant's report is printed to standard error.
``privacy_unit``
    ``{id: <field>, max_contributions: m, max_windows: w}``
    (:class:`~beam_dpsketch.privacy.PrivacyUnit`); element level when left out.
``windowing``
    ``{max_panes_per_window, data_independent_panes, release_range: [start, end]}``
    (:class:`~beam_dpsketch.privacy.Windowing`): what the accountant may assume about the
    input's windowing. It windows nothing: Beam YAML's own ``windowing:`` key (next to
    ``config:``) or a ``WindowInto`` step does.
``label``
    The release's name in the privacy report and its noise keys (default: the step's Beam label,
    its YAML ``name``).
``insecure_test_noise_key``
    An int seed: noise from the publicly known key ``NoiseSource.insecure_for_tests(seed)``.
    INSECURE, for tests only: nothing such a pipeline releases is private, and the transform
    logs a warning saying so. Left out (always, outside tests), every transform draws a secret
    key from ``os.urandom``. The pipeline option ``--insecure_test_noise_key`` sets it for
    every transform of the pipeline that does not set it. With a test key, the key that chooses
    which contributions of a user-level unit are kept is public too
    (:func:`~beam_dpsketch.yaml.config.insecure_test_selection_key`).
"""

import abc
import sys
import typing
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.window import GlobalWindows
from apache_beam.typehints import schemas
from apache_beam.typehints.row_type import RowTypeConstraint

from beam_dpsketch.checks import check_int, check_real
from beam_dpsketch.privacy import BudgetExceededError, PrivacyAccountant, PrivacyBudget
from beam_dpsketch.transforms import (
    DPCount,
    DPFrequencies,
    DPHeavyHitters,
    DPHistogram,
    DPQuantiles,
    DPTransform,
)
from beam_dpsketch.transforms.base import applied_label
from beam_dpsketch.transforms.records import WINDOW_FIELDS, window_values
from beam_dpsketch.yaml.config import (
    accountant_budget,
    budget_from_config,
    check_field,
    insecure_test_selection_key,
    insecure_test_source,
    privacy_unit_from_config,
    shared_accountant,
    windowing_from_config,
)

__all__ = [
    "HEAVY_HITTER_FIELDS",
    "WINDOW_FIELDS",
    "YamlDPCount",
    "YamlDPFrequencies",
    "YamlDPHeavyHitters",
    "YamlDPHistogram",
    "YamlDPQuantiles",
    "YamlDPTransform",
    "YamlTestNoiseOptions",
]

#: The fields of a heavy-hitter row after ``key`` (``lower <= f(key) <= upper`` with probability
#: ``confidence`` for this key alone; ``None`` for mechanisms that state no bound).
HEAVY_HITTER_FIELDS: tuple[tuple[str, Any], ...] = (
    ("estimate", float),
    ("lower", typing.Optional[float]),  # noqa: UP045 - Beam's schema inference reads Optional
    ("upper", typing.Optional[float]),  # noqa: UP045
    ("confidence", typing.Optional[float]),  # noqa: UP045
)


class YamlTestNoiseOptions(PipelineOptions):
    """``--insecure_test_noise_key``: seeded, INSECURE noise for every YAML DP transform (tests)."""

    @classmethod
    def _add_argparse_args(cls, parser: Any) -> None:
        parser.add_argument(
            "--insecure_test_noise_key",
            type=int,
            default=None,
            help="INSECURE, tests only: draw the noise of every beam_dpsketch YAML transform "
            "without its own insecure_test_noise_key from the public seeded key "
            "NoiseSource.insecure_for_tests(seed). Nothing such a pipeline releases is private.",
        )


def _python_type(hint: Any) -> Any:
    """A schema field's type as a row field type: ``Optional`` dropped, numpy ints to ``int``."""
    if typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            hint = args[0]
    if isinstance(hint, type) and issubclass(hint, np.integer):
        return int
    if isinstance(hint, type) and issubclass(hint, np.floating):
        return float
    return hint


def field_type(pcoll: beam.PCollection, field: str, key: str) -> Any:
    """The type of the input rows' field ``field``, given under configuration key ``key``.

    Raises
    ------
    ValueError
        Naming ``key`` when the input has no schema or no such field (the schema is public).
    """
    try:
        fields = dict(schemas.named_fields_from_element_type(pcoll.element_type))
    except (TypeError, ValueError):
        raise ValueError(
            f"{key}: the input has no schema; a YAML DP transform reads rows by field name"
        ) from None
    if field not in fields:
        raise ValueError(
            f"{key}: the input rows have no field {field!r} (fields: {sorted(fields)})"
        )
    return _python_type(fields[field])


class _ToRows(beam.DoFn):
    """Released records as ``beam.Row``: ``to_values`` maps a record to field dicts; the
    release's window and pane are added when ``windowed``."""

    def __init__(self, to_values: Any, windowed: bool) -> None:
        self._to_values = to_values
        self._windowed = windowed

    def process(
        self,
        record: Any,
        window: Any = beam.DoFn.WindowParam,
        pane: Any = beam.DoFn.PaneInfoParam,
    ) -> Iterator[beam.Row]:
        extra = window_values(window, pane) if self._windowed else {}
        for values in self._to_values(record):
            yield beam.Row(**values, **extra)


class YamlDPTransform(beam.PTransform, abc.ABC):
    """The base of the YAML DP transforms: budget, accountant, unit, windowing and noise.

    Subclasses check their own keys in ``__init__`` and implement :meth:`build` (the library
    transform), :meth:`row_fields` and :meth:`converter` (the released rows).

    Parameters
    ----------
    epsilon, delta, accountant, privacy_unit, windowing, label, insecure_test_noise_key
        The common keys of :mod:`beam_dpsketch.yaml.transforms`.

    Raises
    ------
    TypeError, ValueError
        At construction, naming the configuration key, for a value of the wrong type or range,
        a transform without ``epsilon``, or ``delta`` without ``epsilon``.
    """

    def __init__(
        self,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        accountant: dict[str, Any] | None = None,
        privacy_unit: dict[str, Any] | None = None,
        windowing: dict[str, Any] | None = None,
        label: str | None = None,
        insecure_test_noise_key: int | None = None,
    ) -> None:
        super().__init__()
        budget = budget_from_config(epsilon, delta)
        if budget is None:
            raise ValueError(
                "epsilon: every YAML DP transform states its own budget (epsilon, and delta for "
                "approximate DP), also when it charges a shared accountant"
            )
        self.budget: PrivacyBudget = budget
        # Checked here, created per pipeline when applied (shared_accountant).
        if accountant is not None:
            accountant_budget(accountant)
        self._accountant_config = accountant
        self.privacy_unit = privacy_unit_from_config(privacy_unit)
        self.windowing = windowing_from_config(windowing)
        if label is not None and (not isinstance(label, str) or not label.strip()):
            raise ValueError(f"label must be a non-empty string, got {label!r}")
        self._release_label = label
        if insecure_test_noise_key is not None:
            check_int(insecure_test_noise_key, "insecure_test_noise_key", lower=0)
        self._test_key = insecure_test_noise_key
        #: The library transform of the last application (its ``explain()``, ``charge``).
        self.dp_transform: DPTransform | None = None

    @abc.abstractmethod
    def build(self, pcoll: beam.PCollection, **common: Any) -> DPTransform:
        """The library transform for ``pcoll`` with the common keyword arguments ``common``."""

    @abc.abstractmethod
    def row_fields(self, pcoll: beam.PCollection) -> list[tuple[str, Any]]:
        """The fields of a released row, before the window fields."""

    @abc.abstractmethod
    def converter(self) -> Callable[[Any], list[dict[str, Any]]]:
        """A picklable function: the rows (as field dicts) of one released record."""

    def prepare(self, pcoll: beam.PCollection) -> beam.PCollection:
        """The input the library transform takes (default: the rows as they are)."""
        return pcoll

    def test_seed(self, pipeline: beam.Pipeline) -> int | None:
        """The insecure test seed: the transform's, else the pipeline option's, else ``None``."""
        if self._test_key is not None:
            return self._test_key
        return pipeline.options.view_as(YamlTestNoiseOptions).insecure_test_noise_key

    def selection_key(self, pipeline: beam.Pipeline) -> bytes | None:
        """The user-level selection key: public with a test seed, else ``None`` (a secret one)."""
        seed = self.test_seed(pipeline)
        return None if seed is None else insecure_test_selection_key(seed)

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        pipeline = pcoll.pipeline
        accountant: PrivacyAccountant | None = None
        seed = self.test_seed(pipeline)
        if self._accountant_config is not None:
            accountant = shared_accountant(pipeline, self._accountant_config)
        transform = self.build(
            pcoll,
            budget=self.budget,
            accountant=accountant,
            noise_source=None if seed is None else insecure_test_source(pipeline, seed),
            label=self._release_label or applied_label(pcoll, self.label),
        )
        self.dp_transform = transform
        try:
            released = self.prepare(pcoll) | "Release" >> transform
        except BudgetExceededError as exc:
            # Refused while the pipeline is built: nothing has run. The report holds public
            # facts only (parameters, calibrations, charges).
            report = (accountant or transform.accountant).explain()
            print(f"{exc}\n\n{report}", file=sys.stderr, flush=True)
            raise
        windowed = not isinstance(pcoll.windowing.windowfn, GlobalWindows)
        fields = self.row_fields(pcoll) + (list(WINDOW_FIELDS) if windowed else [])
        return released | "ToRows" >> beam.ParDo(
            _ToRows(self.converter(), windowed)
        ).with_output_types(RowTypeConstraint.from_fields(fields))

    def explain(self) -> str:
        """The privacy report of the library transform (once applied)."""
        if self.dp_transform is None:
            raise RuntimeError("explain() is available once the transform is applied")
        return self.dp_transform.explain()


def _heavy_hitter_values(record: Any) -> list[dict[str, Any]]:
    key, count = record[0], record[1]
    bounds = {name: getattr(record, name, None) for name in ("lower", "upper", "confidence")}
    return [
        {
            "key": key,
            "estimate": float(count),
            **{name: None if v is None else float(v) for name, v in bounds.items()},
        }
    ]


class YamlDPHistogram(YamlDPTransform):
    """DP sparse histogram of a field's values (``DPHistogram``): one row per released key.

    Rows: ``key`` (the type of the ``key`` field), ``estimate``, ``lower``, ``upper`` and
    ``confidence`` (``lower <= f(key) <= upper`` with probability ``confidence`` for this key
    alone; ``None`` for mechanisms that state no bound), plus the window fields when windowed.

    Parameters
    ----------
    key
        The field whose values are counted.
    k
        Misra-Gries counters (default: the mechanism's).
    mechanism
        One of ``beam_dpsketch.transforms.heavy_hitters.MECHANISMS``.
    epsilon
        The transform's epsilon.
    delta
        The transform's delta.
    accountant
        A shared accountant ``{name, epsilon, delta}``.
    privacy_unit
        ``{id, max_contributions, max_windows}``.
    windowing
        ``{max_panes_per_window, data_independent_panes, release_range}``.
    label
        The release's name.
    insecure_test_noise_key
        INSECURE seeded noise, tests only.

    Notes
    -----
    **Privacy guarantee.** That of :class:`~beam_dpsketch.transforms.DPHistogram` with these
    parameters (its docstring); the rows are post-processing of its release.
    """

    library_class: type[DPHistogram] = DPHistogram

    def __init__(
        self,
        key: str,
        k: int | None = None,
        mechanism: str | None = None,
        epsilon: float | None = None,
        delta: float | None = None,
        accountant: dict[str, Any] | None = None,
        privacy_unit: dict[str, Any] | None = None,
        windowing: dict[str, Any] | None = None,
        label: str | None = None,
        insecure_test_noise_key: int | None = None,
    ) -> None:
        super().__init__(
            epsilon=epsilon,
            delta=delta,
            accountant=accountant,
            privacy_unit=privacy_unit,
            windowing=windowing,
            label=label,
            insecure_test_noise_key=insecure_test_noise_key,
        )
        self.key = check_field(key, "key")
        self.k = None if k is None else check_int(k, "k")
        if mechanism is not None and not isinstance(mechanism, str):
            raise TypeError(f"mechanism must be a mechanism name, got {mechanism!r}")
        self.mechanism = mechanism
        self._extra: dict[str, Any] = {}

    def library_kwargs(self, pipeline: beam.Pipeline) -> dict[str, Any]:
        """Keyword arguments of the library transform from the privacy unit and windowing."""
        kwargs: dict[str, Any] = {
            "key_fn": self.key,
            "mechanism": self.mechanism,
            "privacy_unit": self.privacy_unit,
            "windowing": self.windowing,
        }
        if self.privacy_unit.is_user_level:
            kwargs["selection_key"] = self.selection_key(pipeline)
        return kwargs

    def build(self, pcoll: beam.PCollection, **common: Any) -> DPTransform:
        field_type(pcoll, self.key, "key")
        budget = common.pop("budget")
        return self.library_class(
            self.k, budget, **self.library_kwargs(pcoll.pipeline), **self._extra, **common
        )

    def row_fields(self, pcoll: beam.PCollection) -> list[tuple[str, Any]]:
        return [("key", field_type(pcoll, self.key, "key")), *HEAVY_HITTER_FIELDS]

    def converter(self) -> Callable[[Any], list[dict[str, Any]]]:
        return _heavy_hitter_values


class YamlDPHeavyHitters(YamlDPHistogram):
    """DP top heavy hitters of a field's values (``DPHeavyHitters``): one row per released key.

    The rows of :class:`YamlDPHistogram`, cut to the ``top`` largest noisy counts.

    Parameters
    ----------
    key
        The field whose values are counted.
    top
        Keys released per window (default: every selected key, at most ``k``).
    k
        Misra-Gries counters (default: the mechanism's).
    mechanism
        One of ``beam_dpsketch.transforms.heavy_hitters.MECHANISMS``.
    epsilon
        The transform's epsilon.
    delta
        The transform's delta.
    accountant
        A shared accountant ``{name, epsilon, delta}``.
    privacy_unit
        ``{id, max_contributions, max_windows}``.
    windowing
        ``{max_panes_per_window, release_range}``.
    label
        The release's name.
    insecure_test_noise_key
        INSECURE seeded noise, tests only.

    Notes
    -----
    **Privacy guarantee.** That of :class:`~beam_dpsketch.transforms.DPHeavyHitters` with these
    parameters (its docstring); the rows are post-processing of its release.
    """

    library_class = DPHeavyHitters

    def __init__(
        self,
        key: str,
        top: int | None = None,
        k: int | None = None,
        mechanism: str | None = None,
        epsilon: float | None = None,
        delta: float | None = None,
        accountant: dict[str, Any] | None = None,
        privacy_unit: dict[str, Any] | None = None,
        windowing: dict[str, Any] | None = None,
        label: str | None = None,
        insecure_test_noise_key: int | None = None,
    ) -> None:
        super().__init__(
            key,
            k=k,
            mechanism=mechanism,
            epsilon=epsilon,
            delta=delta,
            accountant=accountant,
            privacy_unit=privacy_unit,
            windowing=windowing,
            label=label,
            insecure_test_noise_key=insecure_test_noise_key,
        )
        self._extra = {"top": None if top is None else check_int(top, "top")}


def _count_values(record: Any) -> list[dict[str, Any]]:
    return [{"count": int(record.count)}]


class YamlDPCount(YamlDPTransform):
    """DP count of the input rows (``DPCount``): one row ``count`` (an int) per release.

    Parameters
    ----------
    epsilon
        The transform's epsilon.
    delta
        The transform's delta.
    accountant
        A shared accountant ``{name, epsilon, delta}``.
    privacy_unit
        ``{id, max_contributions, max_windows}``.
    windowing
        ``{max_panes_per_window, data_independent_panes, release_range}``.
    label
        The release's name.
    insecure_test_noise_key
        INSECURE seeded noise, tests only.

    Notes
    -----
    **Privacy guarantee.** That of :class:`~beam_dpsketch.transforms.DPCount` with these
    parameters (its docstring); the rows are post-processing of its release.
    """

    def __init__(
        self,
        epsilon: float | None = None,
        delta: float | None = None,
        accountant: dict[str, Any] | None = None,
        privacy_unit: dict[str, Any] | None = None,
        windowing: dict[str, Any] | None = None,
        label: str | None = None,
        insecure_test_noise_key: int | None = None,
    ) -> None:
        super().__init__(
            epsilon=epsilon,
            delta=delta,
            accountant=accountant,
            privacy_unit=privacy_unit,
            windowing=windowing,
            label=label,
            insecure_test_noise_key=insecure_test_noise_key,
        )

    def build(self, pcoll: beam.PCollection, **common: Any) -> DPTransform:
        if self.privacy_unit.id is not None:
            field_type(pcoll, self.privacy_unit.id, "privacy_unit.id")
        return DPCount(
            privacy_unit=self.privacy_unit,
            windowing=self.windowing,
            selection_key=(
                self.selection_key(pcoll.pipeline) if self.privacy_unit.is_user_level else None
            ),
            **common,
        )

    def row_fields(self, pcoll: beam.PCollection) -> list[tuple[str, Any]]:
        return [("count", int)]

    def converter(self) -> Callable[[Any], list[dict[str, Any]]]:
        return _count_values


def _quantile_values(record: Any) -> list[dict[str, Any]]:
    return [{"quantile": float(record.quantile), "value": float(record.value)}]


class YamlDPQuantiles(YamlDPTransform):
    """DP quantiles of a numeric field (``DPQuantiles``): one row per declared level.

    Rows: ``quantile`` (the declared level) and ``value`` (a float), plus the window fields when
    windowed. Values outside ``[lower, upper]`` are clamped to it.

    Parameters
    ----------
    value
        The numeric field.
    quantiles
        The levels, in ``[0, 1]``.
    lower
        Public lower end of the value domain.
    upper
        Public upper end of the value domain.
    resolution
        Domain resolution of a float domain (default: the transform's).
    epsilon
        The transform's epsilon.
    delta
        The transform's delta.
    accountant
        A shared accountant ``{name, epsilon, delta}``.
    privacy_unit
        ``{max_windows}`` (element level; bound users upstream).
    windowing
        ``{max_panes_per_window, data_independent_panes, release_range}``.
    label
        The release's name.
    insecure_test_noise_key
        INSECURE seeded noise, tests only.

    Notes
    -----
    **Privacy guarantee.** That of :class:`~beam_dpsketch.transforms.DPQuantiles` with these
    parameters (its docstring); the rows are post-processing of its release.
    """

    def __init__(
        self,
        value: str,
        quantiles: list[float],
        lower: float,
        upper: float,
        resolution: float | None = None,
        epsilon: float | None = None,
        delta: float | None = None,
        accountant: dict[str, Any] | None = None,
        privacy_unit: dict[str, Any] | None = None,
        windowing: dict[str, Any] | None = None,
        label: str | None = None,
        insecure_test_noise_key: int | None = None,
    ) -> None:
        super().__init__(
            epsilon=epsilon,
            delta=delta,
            accountant=accountant,
            privacy_unit=privacy_unit,
            windowing=windowing,
            label=label,
            insecure_test_noise_key=insecure_test_noise_key,
        )
        self.value = check_field(value, "value")
        if isinstance(quantiles, str) or not isinstance(quantiles, Sequence) or not quantiles:
            raise ValueError(f"quantiles must be a non-empty list of levels, got {quantiles!r}")
        self.quantiles = [check_real(q, "quantiles", 0.0, 1.0) for q in quantiles]
        self.lower = check_real(lower, "lower")
        self.upper = check_real(upper, "upper")
        self.resolution = None if resolution is None else check_real(resolution, "resolution")

    def build(self, pcoll: beam.PCollection, **common: Any) -> DPTransform:
        field_type(pcoll, self.value, "value")
        budget = common.pop("budget")
        return DPQuantiles(
            self.quantiles,
            self.lower,
            self.upper,
            budget,
            resolution=self.resolution,
            value_fn=self.value,
            privacy_unit=self.privacy_unit,
            windowing=self.windowing,
            **common,
        )

    def row_fields(self, pcoll: beam.PCollection) -> list[tuple[str, Any]]:
        return [("quantile", float), ("value", float)]

    def converter(self) -> Callable[[Any], list[dict[str, Any]]]:
        return _quantile_values


def _key_count_values(record: Any) -> list[dict[str, Any]]:
    bound = float(record.error_bound())
    return [
        {"key": key, "estimate": float(estimate), "error_bound": bound}
        for key, estimate in record.as_dict().items()
    ]


def _sketch_values(record: Any) -> list[dict[str, Any]]:
    return [{"sketch": record.to_bytes(), "error_bound": float(record.error_bound())}]


class YamlDPFrequencies(YamlDPTransform):
    """DP frequencies of a field's values (``DPFrequencies``).

    With ``query_keys`` (public keys declared in the pipeline): one row per declared key and
    release, ``key``, ``estimate`` and ``error_bound`` (the per-key noise bound at 95 %), every
    declared key included. Without: one row per release, ``sketch`` (the released sketch's
    versioned bytes, ``beam_dpsketch.sketches.linear.PrivateCountSketch.from_bytes``, or
    ``PrivateCountMinSketch`` for ``sketch: count-min``, ``PrivateCountMedianSketch`` for
    ``sketch: count-median``) and ``error_bound`` (its per-estimate
    bound at 95 %). The window fields are added when windowed.

    Parameters
    ----------
    key
        The field whose values are counted.
    query_keys
        Public keys to count exactly.
    width
        Sketch width (without ``query_keys``).
    depth
        Sketch depth (without ``query_keys``).
    seed
        Public hash seed of the sketch.
    sketch
        ``count-sketch`` (default), ``count-min`` or ``count-median`` (general turnstile
        data).
    weight
        An integer weight field (turnstile).
    neighbouring
        The neighbouring relation (``add_remove``, ``replace``, ``user:k``, ...).
    epsilon
        The transform's epsilon.
    delta
        The transform's delta.
    accountant
        A shared accountant ``{name, epsilon, delta}``.
    privacy_unit
        ``{max_windows}`` (element level; user level through ``neighbouring``).
    windowing
        ``{max_panes_per_window, data_independent_panes, release_range}``.
    label
        The release's name.
    insecure_test_noise_key
        INSECURE seeded noise, tests only.

    Notes
    -----
    **Privacy guarantee.** That of :class:`~beam_dpsketch.transforms.DPFrequencies` with these
    parameters (its docstring); the rows are post-processing of its release.
    """

    def __init__(
        self,
        key: str,
        query_keys: list[Any] | None = None,
        width: int | None = None,
        depth: int | None = None,
        seed: int = 0,
        sketch: str | None = None,
        weight: str | None = None,
        neighbouring: str = "add_remove",
        epsilon: float | None = None,
        delta: float | None = None,
        accountant: dict[str, Any] | None = None,
        privacy_unit: dict[str, Any] | None = None,
        windowing: dict[str, Any] | None = None,
        label: str | None = None,
        insecure_test_noise_key: int | None = None,
    ) -> None:
        super().__init__(
            epsilon=epsilon,
            delta=delta,
            accountant=accountant,
            privacy_unit=privacy_unit,
            windowing=windowing,
            label=label,
            insecure_test_noise_key=insecure_test_noise_key,
        )
        self.key = check_field(key, "key")
        self.weight = check_field(weight, "weight", required=False)
        if query_keys is not None and (
            isinstance(query_keys, str) or not isinstance(query_keys, Sequence)
        ):
            raise TypeError(f"query_keys must be a list of public keys, got {query_keys!r}")
        self.query_keys = None if query_keys is None else list(query_keys)
        self._shape = {
            "width": width,
            "depth": depth,
            "seed": seed,
            "sketch": sketch,
            "neighbouring": neighbouring,
        }

    def build(self, pcoll: beam.PCollection, **common: Any) -> DPTransform:
        field_type(pcoll, self.key, "key")
        if self.weight is not None:
            field_type(pcoll, self.weight, "weight")
        shape = dict(self._shape)
        budget = common.pop("budget")
        return DPFrequencies(
            shape.pop("width"),
            shape.pop("depth"),
            budget,
            query_keys=self.query_keys,
            key_fn=self.key,
            weight_fn=self.weight,
            privacy_unit=self.privacy_unit,
            windowing=self.windowing,
            **shape,
            **common,
        )

    def row_fields(self, pcoll: beam.PCollection) -> list[tuple[str, Any]]:
        if self.query_keys is None:
            return [("sketch", bytes), ("error_bound", float)]
        return [
            ("key", field_type(pcoll, self.key, "key")),
            ("estimate", float),
            ("error_bound", float),
        ]

    def converter(self) -> Callable[[Any], list[dict[str, Any]]]:
        return _sketch_values if self.query_keys is None else _key_count_values
