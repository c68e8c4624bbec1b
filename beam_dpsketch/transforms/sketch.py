"""PTransforms building exact sketches: one per window, or one per group and window.

These are the building blocks of the DP releases (which add noise once, to the merged exact
sketch); on their own they are **not** differentially private.

Example
-------
>>> import apache_beam as beam
>>> from beam_dpsketch.transforms import ReadKeyBatches, SketchGlobally
>>> with beam.Pipeline(runner="FnApiRunner") as p:  # doctest: +SKIP
...     cms = p | ReadKeyBatches("flights.parquet", "route") | SketchGlobally.count_min(2048, 5)
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from beam_dpsketch.transforms.batching import (
    DEFAULT_BATCH_SIZE,
    INVALID_TAG,
    MAIN_TAG,
    BatchKeys,
    BatchKeysPerGroup,
    is_batch_type,
)
from beam_dpsketch.transforms.combiners import SketchCombineFn, SketchFactory, SketchSpec

__all__ = ["SketchGlobally", "SketchPerKey"]

SKETCHES_TAG = "sketches"


class _SketchBase(beam.PTransform, abc.ABC):
    _batcher: type[BatchKeys] = BatchKeys

    def __init__(
        self,
        sketch: SketchSpec | SketchFactory,
        key_fn: Callable[[Any], Any] | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        *,
        batched: bool | None = None,
        dead_letter: bool = False,
    ):
        super().__init__()
        self._combine_fn = SketchCombineFn(sketch)
        if batched not in (None, True, False):
            raise ValueError(f"batched must be None, True or False, got {batched!r}")
        if batched and (key_fn is not None or dead_letter):
            raise ValueError("batched=True skips batching, so it takes no key_fn or dead_letter")
        # Built here so invalid batch_size/key_fn fail at construction.
        self._batch_keys = self._batcher(key_fn, batch_size, dead_letter=dead_letter)
        self._key_fn = key_fn
        self._batched = batched
        self._dead_letter = bool(dead_letter)

    @property
    def sketch_type(self) -> type:
        """The class of the sketches this transform outputs."""
        return self._combine_fn.sketch_type

    @classmethod
    def count_min(cls, width: int, depth: int, seed: int = 0, **kwargs: Any):
        """Build :class:`~beam_dpsketch.sketches.CountMinSketch` es; ``kwargs`` as the class."""
        return cls(SketchSpec.count_min(width, depth, seed), **kwargs)

    @classmethod
    def count_sketch(cls, width: int, depth: int, seed: int = 0, **kwargs: Any):
        """Build :class:`~beam_dpsketch.sketches.CountSketch` es; ``kwargs`` as the class."""
        return cls(SketchSpec.count_sketch(width, depth, seed), **kwargs)

    @classmethod
    def misra_gries(cls, k: int, **kwargs: Any):
        """Build :class:`~beam_dpsketch.sketches.MisraGries` summaries; ``kwargs`` as the class."""
        return cls(SketchSpec.misra_gries(k), **kwargs)

    @abc.abstractmethod
    def _skip_batching(self, pcoll: beam.PCollection) -> bool:
        """Whether the input is already batched (typed as arrays), so BatchKeys is skipped."""

    @abc.abstractmethod
    def _combine(self, batches: beam.PCollection) -> beam.PCollection:
        """Combine the batches into sketches (globally or per group)."""

    def expand(self, pcoll):
        if self._skip_batching(pcoll):
            return self._combine(pcoll)
        batched = pcoll | "BatchKeys" >> self._batch_keys
        if not self._dead_letter:
            return self._combine(batched)
        return {SKETCHES_TAG: self._combine(batched[MAIN_TAG]), INVALID_TAG: batched[INVALID_TAG]}


class SketchGlobally(_SketchBase):
    """Build one exact sketch per window from a PCollection of keys, records or key batches.

    Parameters
    ----------
    sketch
        A :class:`~beam_dpsketch.transforms.combiners.SketchSpec` or a zero-argument factory
        of empty sketches. Prefer the constructors :meth:`count_min`, :meth:`count_sketch` and
        :meth:`misra_gries`.
    key_fn
        Optional function from an element (a record) to its key.
    batch_size
        Keys per batch fed to the sketch (see :class:`~beam_dpsketch.transforms.BatchKeys`).
    batched
        ``None`` (default): elements may be keys, records or ready-made batches (numpy or
        pyarrow arrays, passed through as they are); batching is skipped when the input's
        element type is an array type (as from :class:`~beam_dpsketch.transforms.ReadKeyBatches`).
        ``True``: every element is a batch, never batch again. ``False``: always batch.
    dead_letter
        If true, invalid keys go to an ``"invalid"`` output instead of failing the pipeline.

    Returns
    -------
    PCollection
        One sketch per window. In the global window, empty input gives an empty sketch; other
        windows exist only when they hold data (Beam's semantics). With ``dead_letter=True``, a
        dict ``{"sketches": ..., "invalid": ...}`` (invalid: ``(element, reason)`` pairs).

    Raises
    ------
    ValueError
        At construction, for an invalid sketch parameter (the message names it).
    TypeError
        At run time, for an invalid key (None, float, list, ...), unless ``dead_letter``.

    Notes
    -----
    Count-Min and Count Sketch results equal the sketch of all the window's keys built in one
    pass (they are linear). A Misra-Gries result depends on how Beam split and merged the
    input, within ``f(x) - n/(k+1) <= estimate(x) <= f(x)``; with a single bundle it equals the
    sequential sketch.
    """

    def _skip_batching(self, pcoll: beam.PCollection) -> bool:
        if self._batched is not None:
            return self._batched
        return self._key_fn is None and not self._dead_letter and is_batch_type(pcoll.element_type)

    def _combine(self, batches: beam.PCollection) -> beam.PCollection:
        combine = beam.CombineGlobally(self._combine_fn)
        if not isinstance(batches.windowing.windowfn, GlobalWindows):
            # Beam cannot produce a default (empty) output for windows that never existed.
            combine = combine.without_defaults()
        return batches | "Combine" >> combine.with_output_types(self.sketch_type)


class SketchPerKey(_SketchBase):
    """Build one exact sketch per group and window from ``(group, key)`` pairs.

    Same parameters as :class:`SketchGlobally`; ``key_fn`` applies to the value of each pair,
    and ready-made batches arrive as ``(group, batch)`` pairs (pass ``batched=True`` when every
    element is one). numpy scalar groups are converted to Python scalars.

    Returns
    -------
    PCollection
        ``(group, sketch)`` pairs, one per group and window. With ``dead_letter=True``, a dict
        ``{"sketches": ..., "invalid": ...}``.
    """

    _batcher = BatchKeysPerGroup

    def _skip_batching(self, pcoll: beam.PCollection) -> bool:
        return bool(self._batched)

    def _combine(self, batches: beam.PCollection) -> beam.PCollection:
        return batches | "Combine" >> beam.CombinePerKey(self._combine_fn).with_output_types(
            tuple[Any, self.sketch_type]
        )
