"""The release records of the DP transforms: typed rows with a Beam schema.

Every DP transform declares the type of what it releases (``output.element_type``), so that
downstream coders, ``beam.Row`` consumers and Beam DataFrames see the fields. The row types
below are ``NamedTuple`` classes registered with Beam's ``RowCoder``; being tuples, they
unpack and compare like the plain tuples they replace (``step, key, estimate = record``).

===============================  =================================================================
transform                        element type
===============================  =================================================================
``DPHistogram``,                 :class:`BoundedKeyEstimate` (key, estimate and its bound:
``DPHeavyHitters``               ``lower``, ``upper``, ``confidence``); :class:`KeyEstimate`
                                 for the user-level mechanisms without an error bound
                                 (``pamg-gshm``, ``user-exact``)
``DPFrequencies``                the released private sketch
                                 (``PrivateCountMinSketch``, ``PrivateCountSketch``,
                                 ``PrivateCountMedianSketch`` of
                                 :mod:`beam_dpsketch.sketches.linear.private`), or
                                 :class:`~beam_dpsketch.sketches.linear.key_counts.PrivateKeyCounts`
                                 for declared ``query_keys`` (see below); with
                                 ``output="rows"``: :class:`ReleasedSketch`, or
                                 :class:`BoundedKeyEstimate` per declared key
``ContinualDPSketch``            :class:`StepEstimate`
``DPSlidingWindowFrequencies``   :class:`TimedEstimate`; :class:`TimedHeavyHitters` for
                                 heavy-hitter queries (``candidates`` with ``gamma``)
``DPIntermittentQueries``        :class:`TimedEstimate`; :class:`IntermittentRecord` with
                                 ``with_metadata=True``
``DPCount``                      :class:`CountEstimate`
``DPQuantiles``                  :class:`QuantileEstimate`
``BoundContributions``           its input rows (it bounds contributions, it releases nothing)
``WithWindowBounds`` applied to  ``Windowed<Name>`` (:data:`WINDOWED_TYPES`): the row's fields,
a windowed release of rows       then ``window_start``, ``window_end`` (event-time seconds) and
                                 ``pane_index``
===============================  =================================================================

With ``with_metadata=True`` the windowed transforms emit their release objects instead
(:class:`~beam_dpsketch.transforms.release.Release`,
:class:`~beam_dpsketch.transforms.continual.ContinualRelease`,
:class:`~beam_dpsketch.transforms.sliding.SlidingWindowRelease`): one object per release,
holding the window, the pane and the release's guarantee once, with the released rows inside.

By default ``DPFrequencies`` releases a private sketch, not rows: the sketch answers point
queries for keys chosen later (its estimate for a key no one asked about is itself a release of
the same guarantee), it merges with nothing, and it travels as its versioned bytes
(:mod:`beam_dpsketch.serialization`) through the sketch coders of
:mod:`~beam_dpsketch.transforms.combiners`. Its element type is its class; that is the form to
read as a side input. ``DPFrequencies(..., output="rows")`` releases the same sketch as one
:class:`ReleasedSketch` row: its public parameters and guarantee as fields and the sketch's
versioned bytes in base64 text (``decode()`` gives the sketch back), the form for sinks; with
``query_keys`` it releases one :class:`BoundedKeyEstimate` per declared key.

The guarantee is not repeated on every row: it is the release's, stated by the transform's
``explain()`` and, with ``with_metadata=True``, by the release object.

A release that states an error bound states it in one vocabulary: ``lower <= f(key) <= upper``
with probability ``confidence`` for that key alone (:class:`BoundedKeyEstimate`, whose
``error_bound`` property is the larger distance from the estimate to either end).

**Leaving Beam.** A release of rows goes as it is, with no ``Map``, to
``apache_beam.dataframe.convert.to_dataframe`` (one column per field), to
``beam.io.WriteToJson`` (one object per row; pass ``double_precision=15``, since pandas keeps
10 significant digits by default) and to Parquet through the DataFrame's ``to_parquet`` (pass
``index=False``). ``beam.io.WriteToParquet`` derives its Arrow schema from the row schema and
takes rows whose fields all have a concrete type (:class:`CountEstimate`); a ``key`` (whatever
type the input's keys have) or an estimate that is an ``int`` or a ``float`` depending on the
mechanism is a Python-object field that Beam does not convert to Arrow, so such rows go to
Parquet through the DataFrame, or through
:class:`~beam_dpsketch.io.parquet.WriteReleaseToParquet` (Beam's Parquet writer with the schema
of :func:`~beam_dpsketch.io.parquet.parquet_schema`, given the public type of the keys,
``key_type=str``, ``int`` or ``bytes``; an ``int``-or-``float`` estimate becomes ``float64``).

**Windows.** The rows a transform emits carry no window, so that a row unpacks the same in
every pipeline. In fixed or sliding windows, :class:`WithWindowBounds` turns a release into
``Windowed<Name>`` rows (``WindowedBoundedKeyEstimate``, ...) that end with ``window_start``,
``window_end`` and ``pane_index``, so that readers outside Beam tell windows and panes apart
(it refuses the global window, which has no bounds). The bounds are public: those of fixed and
sliding windows come from the windowing's parameters, and the DP transforms refuse session
windows, whose bounds would come from the data. ``with_metadata=True`` instead gives one
release object per pane with its window, pane and guarantee.
"""

# No ``from __future__ import annotations`` here: Beam reads the field types of a NamedTuple
# from its annotations at registration, and needs them as types, not strings.
import base64
import types
import typing
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import apache_beam as beam

from beam_dpsketch import serialization
from beam_dpsketch.sketches.linear.private import PRIVATE_LINEAR_SKETCHES
from beam_dpsketch.sketches.misra_gries import HeavyHitterEstimate
from beam_dpsketch.transforms.windowing_rules import has_window_bounds, window_bounds_refusal

#: An estimate is an ``int`` for discrete-noise releases and a ``float`` otherwise; the union
#: keeps the released type through the coder instead of turning integers into floats.
Number = int | float


class CountEstimate(NamedTuple):
    """One released noisy count of elements (``DPCount``, one per released pane).

    Attributes
    ----------
    count
        The noisy number of elements (an ``int``: discrete noise).
    """

    count: int


class QuantileEstimate(NamedTuple):
    """One released quantile (``DPQuantiles``, one per declared quantile and released pane).

    Attributes
    ----------
    quantile
        The declared quantile level in ``[0, 1]``.
    value
        The private value at that level: an ``int`` on an integer domain, a ``float`` on a
        float domain.
    """

    quantile: float
    value: Number


class KeyEstimate(NamedTuple):
    """One released ``(key, estimate)`` pair.

    Attributes
    ----------
    key
        The released key (public once released: it passed the mechanism's threshold or was
        declared).
    estimate
        The noisy count of ``key``.
    """

    key: Any
    estimate: Number


class BoundedKeyEstimate(NamedTuple):
    """One released ``(key, estimate)`` pair with the estimate's error bound.

    The bound vocabulary of every release that states one: ``lower <= f(key) <= upper`` holds
    with probability at least ``confidence`` for this key alone, where ``f(key)`` is the key's
    true count. The first two fields unpack like :class:`KeyEstimate`
    (``key, estimate, *_ = row``); :attr:`error_bound` is the symmetric form of the bound.

    Attributes
    ----------
    key
        The released key (public once released: it passed the mechanism's threshold).
    estimate
        The noisy count of ``key`` (an ``int`` for discrete noise, else a ``float``).
    lower, upper
        The bound's ends; functions of released values and public parameters only.
    confidence
        The probability of ``lower <= f(key) <= upper`` for this key alone.
    """

    key: Any
    estimate: Number
    lower: float
    upper: float
    confidence: float

    @property
    def count(self) -> Number:
        """The estimate, under the name the sketch layer's ``HeavyHitterEstimate`` gives it."""
        return self.estimate

    @property
    def error_bound(self) -> float:
        """``max(estimate - lower, upper - estimate)``: ``|estimate - f(key)| <= error_bound``."""
        return max(float(self.estimate) - self.lower, self.upper - float(self.estimate))


class StepEstimate(NamedTuple):
    """One noisy estimate of a continual release after time step ``step``.

    Attributes
    ----------
    step
        Time steps processed so far (``1..horizon``): the estimate is the sketch's output after
        ``step`` arrivals (element model) or panes (pane model).
    key
        A declared query key.
    estimate
        The noisy frequency of ``key`` at ``step``.
    """

    step: int
    key: Any
    estimate: Number


class TimedEstimate(NamedTuple):
    """One answered query of a series released at declared times.

    Attributes
    ----------
    time
        The query's time: a position or step (count clock) or an event time in seconds.
    key
        The query key.
    estimate
        The private estimate of ``key`` at ``time``.
    """

    time: Number
    key: Any
    estimate: Number


class TimedHeavyHitters(NamedTuple):
    """The heavy hitters among declared candidates at one query time.

    Attributes
    ----------
    time
        The query's time, as in :class:`TimedEstimate`.
    heavy_hitters
        The candidates whose estimate passed the release's threshold, with their estimates,
        in candidate order (possibly empty: an empty answer is a release too).
    """

    time: Number
    heavy_hitters: Sequence[KeyEstimate]


class IntermittentRecord(NamedTuple):
    """One answer of ``DPIntermittentQueries`` with its public metadata (``with_metadata=True``).

    Attributes
    ----------
    time
        The batch's declared time.
    key
        The query key.
    estimate
        The private estimate (median of signed noisy cells for Count Sketch, minimum for
        Count-Min), as the core returns it.
    batch
        1-based index of the batch among the non-empty batches.
    noise_std
        Standard deviation of the DP noise in this answer (public:
        ``docs/algorithms.md#int-error-bars``).
    epsilon
        Cost of the release this record belongs to, which is the whole transform: the pure-DP
        guarantee of every answer of every batch together (not per record), under the
        neighbouring relation of the declared clock.
    mechanism
        Mechanism name (as in the accountant's report).
    neighbouring_relation
        The neighbouring relation ``epsilon`` holds for (one of
        ``beam_dpsketch.transforms.intermittent.CLOCKS``).
    """

    time: Number
    key: Any
    estimate: Number
    batch: int
    noise_std: float
    epsilon: float
    mechanism: str
    neighbouring_relation: str


#: The released linear sketches a :class:`ReleasedSketch` row can hold, by its ``kind``.
SKETCH_CLASSES: dict[str, type] = dict(PRIVATE_LINEAR_SKETCHES)


class ReleasedSketch(NamedTuple):
    """One released private linear sketch as a row (``DPFrequencies(..., output="rows")``).

    The sketch itself travels as its versioned bytes (:mod:`beam_dpsketch.serialization`) in
    base64 text; the other fields are its public parameters and guarantee, read off the
    released object, so a table of releases can be filtered and joined without decoding.
    :meth:`decode` gives back the queryable sketch, equal to the one ``output="object"``
    releases; :meth:`sketch_bytes` the versioned bytes.

    The sketch field is text, not ``bytes``, so that the row goes to every sink as it is: JSON
    has no bytes type (Beam's JSON writers refuse one), and a Beam DataFrame holds a bytes
    column as fixed-width numpy bytes, which drop the trailing zero bytes of a value and are
    cut at the first zero byte by ``to_parquet``.

    Every field is public or a function of the released table: the shape and seed are public
    parameters, the guarantee and noise are the calibration's (computed from public parameters
    before any data is seen) and ``error_bound`` is post-processing of the released cells.

    Attributes
    ----------
    kind
        ``"count-sketch"`` or ``"count-min"`` (the ``sketch`` parameter of ``DPFrequencies``).
    width, depth, seed
        The sketch's shape and public hash seed.
    format_version
        The version of the serialization format of ``sketch``.
    noise, noise_scale
        The noise distribution of every cell (``"discrete_laplace"`` or
        ``"discrete_gaussian"``) and its scale (Laplace ``b`` or Gaussian ``sigma``).
    epsilon, delta, rho
        The sketch's guarantee under ``neighbouring`` for any number of queries (Zhao et al.,
        Theorems 3.1 and 3.2): ``epsilon`` (and ``delta``) for pure or approximate DP, ``rho``
        for zCDP; ``None`` where it does not apply.
    neighbouring
        The neighbouring relation the noise is calibrated for.
    error_bound, confidence
        ``|estimate(x) - f(x)| <= error_bound`` with probability about ``confidence`` for one
        key fixed in advance (the sketch's ``error_bound(confidence)``: hashing and noise).
    sketch
        The released sketch's versioned bytes in base64 (RFC 4648, standard alphabet, padded):
        ``PrivateCountSketch.from_bytes``, ``PrivateCountMinSketch.from_bytes`` or
        ``PrivateCountMedianSketch.from_bytes`` of ``base64.b64decode(sketch)``, by ``kind``.
    """

    kind: str
    width: int
    depth: int
    seed: int
    format_version: int
    noise: str
    noise_scale: float
    epsilon: typing.Optional[float]  # noqa: UP045 - Beam's schema inference reads Optional
    delta: typing.Optional[float]  # noqa: UP045
    rho: typing.Optional[float]  # noqa: UP045
    neighbouring: str
    error_bound: float
    confidence: float
    sketch: str

    @classmethod
    def of(cls, private: Any, confidence: float = 0.95) -> "ReleasedSketch":
        """The row of a released ``PrivateCountSketch``, ``PrivateCountMinSketch`` or
        ``PrivateCountMedianSketch``."""
        kind = getattr(private, "SKETCH_KIND", None)
        if kind not in SKETCH_CLASSES or not isinstance(private, SKETCH_CLASSES[kind]):
            raise TypeError(
                f"private must be a released linear sketch, got {type(private).__name__}"
            )
        return cls(
            kind=kind,
            width=int(private.width),
            depth=int(private.depth),
            seed=int(private.seed),
            format_version=serialization.FORMAT_VERSION,
            noise=str(private.noise),
            noise_scale=float(private.scale),
            epsilon=None if private.epsilon is None else float(private.epsilon),
            delta=None if private.delta is None else float(private.delta),
            rho=None if private.rho is None else float(private.rho),
            neighbouring=str(private.neighbouring),
            error_bound=float(private.error_bound(confidence)),
            confidence=float(confidence),
            sketch=base64.b64encode(private.to_bytes()).decode("ascii"),
        )

    def __repr__(self) -> str:
        # The sketch is the table: shown by its length only, so a logged row stays short.
        fields = ", ".join(
            f"sketch=<{len(self.sketch)} base64 chars>"
            if name == "sketch"
            else f"{name}={getattr(self, name)!r}"
            for name in self._fields
        )
        return f"{type(self).__name__}({fields})"

    def sketch_bytes(self) -> bytes:
        """The released sketch's versioned bytes (:mod:`beam_dpsketch.serialization`).

        Raises
        ------
        SketchFormatError
            If ``sketch`` is not base64 text (a ``ValueError``).
        """
        try:
            return base64.b64decode(self.sketch, validate=True)
        except (TypeError, ValueError):
            raise serialization.SketchFormatError("sketch must be base64 text") from None

    def decode(self) -> Any:
        """The queryable released sketch (``estimate``, ``heavy_hitters``, ``error_bound``).

        Raises
        ------
        SketchFormatError
            If ``sketch`` is malformed or not of ``kind`` (a ``ValueError``).
        """
        if self.kind not in SKETCH_CLASSES:
            raise serialization.SketchFormatError(
                f"kind must be one of {tuple(SKETCH_CLASSES)}, got {self.kind!r}"
            )
        return SKETCH_CLASSES[self.kind].from_bytes(self.sketch_bytes())


def as_key_estimate(record: Any) -> KeyEstimate | BoundedKeyEstimate:
    """The typed row of a released ``(key, count)`` pair, with its bound when it carries one.

    A sketch layer's ``HeavyHitterEstimate`` becomes :class:`BoundedKeyEstimate` (its
    ``lower``, ``upper`` and ``confidence`` kept as they are), any other pair
    :class:`KeyEstimate`; the key, the estimate and their order are unchanged.
    """
    if isinstance(record, HeavyHitterEstimate):
        key, estimate = record
        return BoundedKeyEstimate(key, estimate, record.lower, record.upper, record.confidence)
    key, estimate = record
    return KeyEstimate(key, estimate)


#: The row types of the vocabulary, each registered with Beam's ``RowCoder``.
RECORD_TYPES: tuple[type, ...] = (
    CountEstimate,
    QuantileEstimate,
    KeyEstimate,
    BoundedKeyEstimate,
    StepEstimate,
    TimedEstimate,
    TimedHeavyHitters,
    IntermittentRecord,
    ReleasedSketch,
)

#: The fields :class:`WithWindowBounds` appends to a row: the release's window bounds in
#: event-time seconds and the pane's index in its window (0 for the first pane).
WINDOW_FIELDS: tuple[tuple[str, type], ...] = (
    ("window_start", float),
    ("window_end", float),
    ("pane_index", int),
)


def window_values(window: Any, pane: Any) -> dict[str, Any]:
    """The :data:`WINDOW_FIELDS` of a release in ``window`` and ``pane`` (Beam's objects).

    Public: a fixed or sliding window's bounds depend on its parameters and the window's
    position only, and which panes a transform may release is declared up front.
    """
    return {
        "window_start": float(window.start.micros) / 1e6,
        "window_end": float(window.end.micros) / 1e6,
        "pane_index": int(pane.index),
    }


def _windowed_type(record_type: type) -> type:
    """``Windowed<Name>``: the fields of ``record_type`` followed by :data:`WINDOW_FIELDS`.

    The public properties and methods of ``record_type`` (``error_bound``, ``decode``, ...)
    and its own ``repr`` are kept (not its class methods): they read fields by name, and the leading fields are the same.
    """
    name = f"Windowed{record_type.__name__}"
    fields = [*typing.get_type_hints(record_type).items(), *WINDOW_FIELDS]
    windowed = NamedTuple(name, fields)  # type: ignore[misc]
    for attr, value in vars(record_type).items():
        # Properties and methods only: a class method would build the unwindowed fields.
        # A repr is kept only when written here: the one collections generates for a
        # NamedTuple formats exactly the original fields.
        own_repr = attr == "__repr__" and getattr(value, "__module__", None) == __name__
        public = not attr.startswith("_") or own_repr
        if public and isinstance(value, property | types.FunctionType):
            setattr(windowed, attr, value)
    windowed.__module__ = __name__
    windowed.__doc__ = (
        f"A :class:`{record_type.__name__}` with the release's window: ``window_start``, "
        "``window_end`` (event-time seconds) and ``pane_index``."
    )
    return windowed


#: The windowed row type of each row type (:class:`WithWindowBounds`), named
#: ``Windowed<Name>`` (e.g. ``WindowedBoundedKeyEstimate``) and importable from this module.
WINDOWED_TYPES: dict[type, type] = {t: _windowed_type(t) for t in RECORD_TYPES}
globals().update({t.__name__: t for t in WINDOWED_TYPES.values()})
_WINDOWED_SET = frozenset(WINDOWED_TYPES.values())

for _record_type in (*RECORD_TYPES, *WINDOWED_TYPES.values()):
    beam.coders.registry.register_coder(_record_type, beam.coders.RowCoder)


class _AddWindow(beam.DoFn):
    """Each row with the window and pane it was released in."""

    def __init__(self, windowed: type) -> None:
        self._windowed = windowed

    def process(
        self,
        row: Any,
        window: Any = beam.DoFn.WindowParam,
        pane: Any = beam.DoFn.PaneInfoParam,
    ) -> Iterator[Any]:
        yield self._windowed(*row, **window_values(window, pane))


class WithWindowBounds(beam.PTransform):
    """A windowed release's rows with their window bounds and pane, for readers outside Beam.

    Takes the release of a DP transform (rows of a type of this module, e.g.
    :class:`BoundedKeyEstimate`) in fixed or sliding windows and emits, for each row, the
    ``Windowed<Name>`` row (:data:`WINDOWED_TYPES`): the same fields followed by
    ``window_start``, ``window_end`` (event-time seconds) and ``pane_index``, with a registered
    row coder. Windows and panes are unchanged; in a DataFrame or a file two windows' rows are
    told apart by these fields. Every DP transform applies it to a row release in fixed or
    sliding windows itself (its output type is then the ``Windowed<Name>`` row); on such a
    release this transform changes nothing.

    Notes
    -----
    **Privacy.** Post-processing: the added fields are the public bounds of the window the row
    was released in (the bounds of fixed and sliding windows depend on public parameters only;
    the DP transforms refuse session windows, whose bounds would come from the data) and the
    pane's index, which the transform's declared ``max_panes_per_window`` bounds. No budget is
    spent.

    Raises
    ------
    ValueError
        At pipeline construction, for an input in the global window (it has no bounds) or an
        input whose element type is not a row type of this module.
    """

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        if pcoll.element_type in _WINDOWED_SET:
            # The DP transforms already add the bounds to rows released in windows.
            return pcoll
        windowed = WINDOWED_TYPES.get(pcoll.element_type)
        if windowed is None:
            raise ValueError(
                "WithWindowBounds takes a release of rows of beam_dpsketch.transforms.records "
                f"(got element type {pcoll.element_type}); DPFrequencies releases rows with "
                'output="rows"'
            )
        if not has_window_bounds(pcoll):
            raise window_bounds_refusal("WithWindowBounds")
        return add_window_bounds(pcoll, pcoll.element_type)


def add_window_bounds(pcoll: beam.PCollection, row_type: type) -> beam.PCollection:
    """``pcoll``'s rows of ``row_type`` as ``Windowed<Name>`` rows (:class:`WithWindowBounds`,
    for a release whose element type is declared only once its transform's ``expand``
    returns)."""
    windowed = WINDOWED_TYPES[row_type]
    return pcoll | "AddWindow" >> beam.ParDo(_AddWindow(windowed)).with_output_types(windowed)
