"""The release records of the DP transforms: typed rows with a Beam schema.

Every DP transform declares the type of what it releases (``output.element_type``), so that
downstream coders, ``beam.Row`` consumers and Beam DataFrames see the fields. The row types
below are ``NamedTuple`` classes registered with Beam's ``RowCoder``; being tuples, they
unpack and compare like the plain tuples they replace (``step, key, estimate = record``).

===============================  =================================================================
transform                        element type
===============================  =================================================================
``DPHistogram``,                 :class:`~beam_dpsketch.sketches.misra_gries.HeavyHitterEstimate`
``DPHeavyHitters``               (a ``(key, count)`` pair carrying ``lower``/``upper`` bounds);
                                 :class:`KeyEstimate` for the user-level mechanisms without an
                                 error bound (``pamg-gshm``, ``user-exact``)
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


def as_key_estimate(record: Any) -> Any:
    """``record`` if it carries an error bound (a ``HeavyHitterEstimate``), else ``KeyEstimate``.

    A released ``(key, count)`` pair without a bound becomes the typed row; its values and
    their order are unchanged.
    """
    if isinstance(record, HeavyHitterEstimate):
        return record
    key, estimate = record
    return KeyEstimate(key, estimate)


#: The row types of the vocabulary, each registered with Beam's ``RowCoder``.
RECORD_TYPES: tuple[type, ...] = (
    CountEstimate,
    QuantileEstimate,
    KeyEstimate,
    StepEstimate,
    TimedEstimate,
    TimedHeavyHitters,
    IntermittentRecord,
)

for _record_type in RECORD_TYPES:
    beam.coders.registry.register_coder(_record_type, beam.coders.RowCoder)
