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
                                 (``PrivateCountMinSketch``, ``PrivateCountSketch`` of
                                 :mod:`beam_dpsketch.sketches.linear.private`), or
                                 :class:`~beam_dpsketch.sketches.linear.key_counts.PrivateKeyCounts`
                                 for declared ``query_keys`` (see below)
``ContinualDPSketch``            :class:`StepEstimate`
``DPSlidingWindowFrequencies``   :class:`TimedEstimate`; :class:`TimedHeavyHitters` for
                                 heavy-hitter queries (``candidates`` with ``gamma``)
``DPIntermittentQueries``        :class:`TimedEstimate`; :class:`IntermittentRecord` with
                                 ``with_metadata=True``
``DPCount``                      :class:`CountEstimate`
``DPQuantiles``                  :class:`QuantileEstimate`
``BoundContributions``           its input rows (it bounds contributions, it releases nothing)
===============================  =================================================================

With ``with_metadata=True`` the windowed transforms emit their release objects instead
(:class:`~beam_dpsketch.transforms.release.Release`,
:class:`~beam_dpsketch.transforms.continual.ContinualRelease`,
:class:`~beam_dpsketch.transforms.sliding.SlidingWindowRelease`): one object per release,
holding the window, the pane and the release's guarantee once, with the released rows inside.

``DPFrequencies`` releases a private sketch, not rows: the sketch answers point queries for
keys chosen later (its estimate for a key no one asked about is itself a release of the same
guarantee), it merges with nothing, and it travels as its versioned bytes
(:mod:`beam_dpsketch.serialization`) through the sketch coders of
:mod:`~beam_dpsketch.transforms.combiners`. Its element type is its class.

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
Parquet through the DataFrame. Rows carry no window: in windowed pipelines,
``with_metadata=True`` gives each release's window bounds and pane.
"""

# No ``from __future__ import annotations`` here: Beam reads the field types of a NamedTuple
# from its annotations at registration, and needs them as types, not strings.
from collections.abc import Sequence
from typing import Any, NamedTuple

import apache_beam as beam

from beam_dpsketch.sketches.misra_gries import HeavyHitterEstimate

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
)

for _record_type in RECORD_TYPES:
    beam.coders.registry.register_coder(_record_type, beam.coders.RowCoder)
