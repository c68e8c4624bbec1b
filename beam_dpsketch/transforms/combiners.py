"""Beam ``CombineFn`` and coder adapters over the exact sketches of :mod:`beam_dpsketch.sketches`.

Accumulators are exact sketches (``docs/algorithms.md#exact-partials``): each bundle builds a
partial sketch with
``add_input``, Beam merges partials with ``merge_accumulators`` in a tree of its choosing, and no
noise is ever added here. Accumulators cross process boundaries through :class:`SketchCoder`,
which uses the versioned binary format of :mod:`beam_dpsketch.serialization`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam import coders

from beam_dpsketch.checks import check_int
from beam_dpsketch.hashing import MAX_DEPTH, MAX_SEED, MAX_WIDTH, hash_key
from beam_dpsketch.sketches import CountMedianSketch, CountMinSketch, CountSketch, MisraGries
from beam_dpsketch.sketches.misra_gries.sketch import MAX_K
from beam_dpsketch.transforms.batching import is_key_batch

__all__ = [
    "SKETCH_KINDS",
    "SketchCoder",
    "SketchCombineFn",
    "SketchSpec",
    "as_sketch_factory",
    "sum_by_cell",
]

Sketch = CountMinSketch | CountSketch | CountMedianSketch | MisraGries


def sum_by_cell(cells: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sparse counts summed per cell: the sorted distinct ``cells`` and their totals, zero
    totals dropped (the exact, order-independent fold of sparse accumulators)."""
    if not len(cells):
        return cells, counts
    order = np.argsort(cells, kind="stable")
    cells, counts = cells[order], counts[order]
    starts = np.flatnonzero(np.r_[True, cells[1:] != cells[:-1]])
    cells, counts = cells[starts], np.add.reduceat(counts, starts)
    keep = counts != 0
    return cells[keep], counts[keep]


SketchFactory = Callable[[], Any]

SKETCH_KINDS: dict[str, type] = {
    "count-min": CountMinSketch,
    "count-sketch": CountSketch,
    "count-median": CountMedianSketch,
    "misra-gries": MisraGries,
}
_PARAM_BOUNDS: dict[str, tuple[int, int]] = {
    "k": (1, MAX_K),
    "width": (1, MAX_WIDTH),
    "depth": (1, MAX_DEPTH),
    "seed": (0, MAX_SEED),
}


@dataclass(frozen=True)
class SketchSpec:
    """A small, picklable description of an empty sketch; calling it builds one.

    Use the constructors :meth:`count_min`, :meth:`count_sketch`, :meth:`count_median` and
    :meth:`misra_gries`, which validate every parameter at pipeline construction, as the sketch
    classes do (``TypeError`` for a wrong type, ``ValueError`` for a wrong value, naming the
    parameter), long before a worker allocates a table.

    Parameters
    ----------
    kind
        One of ``"count-min"``, ``"count-sketch"``, ``"count-median"``, ``"misra-gries"``.
    params
        Constructor arguments of the sketch class: ``width``, ``depth``, ``seed`` for the linear
        sketches, ``k`` for Misra-Gries.
    """

    kind: str
    params: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in SKETCH_KINDS:
            raise ValueError(f"kind must be one of {sorted(SKETCH_KINDS)}, got {self.kind!r}")
        names = ("k",) if self.kind == "misra-gries" else ("width", "depth", "seed")
        if set(self.params) != set(names):
            raise ValueError(
                f"a {self.kind} spec takes parameters {sorted(names)}, got {sorted(self.params)}"
            )
        checked = {n: check_int(self.params[n], n, *_PARAM_BOUNDS[n]) for n in names}
        # Frozen: normalise numpy ints to Python ints through object.__setattr__.
        object.__setattr__(self, "params", checked)

    def __hash__(self) -> int:
        # Stable across processes, like every hash in the library (never the salted built-in).
        return hash_key((self.kind, *sorted(self.params.items())), 0)[0]

    @classmethod
    def count_min(cls, width: int, depth: int, seed: int = 0) -> SketchSpec:
        """Spec of an empty :class:`~beam_dpsketch.sketches.CountMinSketch`."""
        return cls("count-min", {"width": width, "depth": depth, "seed": seed})

    @classmethod
    def count_sketch(cls, width: int, depth: int, seed: int = 0) -> SketchSpec:
        """Spec of an empty :class:`~beam_dpsketch.sketches.CountSketch`."""
        return cls("count-sketch", {"width": width, "depth": depth, "seed": seed})

    @classmethod
    def count_median(cls, width: int, depth: int, seed: int = 0) -> SketchSpec:
        """Spec of an empty :class:`~beam_dpsketch.sketches.CountMedianSketch`."""
        return cls("count-median", {"width": width, "depth": depth, "seed": seed})

    @classmethod
    def misra_gries(cls, k: int) -> SketchSpec:
        """Spec of an empty :class:`~beam_dpsketch.sketches.MisraGries` with ``k`` counters."""
        return cls("misra-gries", {"k": k})

    @property
    def sketch_type(self) -> type:
        """The sketch class this spec builds."""
        return SKETCH_KINDS[self.kind]

    def __call__(self) -> Sketch:
        return self.sketch_type(**self.params)


def as_sketch_factory(
    spec_or_factory: SketchSpec | SketchFactory,
    required: tuple[str, ...] = ("update", "merge", "to_bytes", "from_bytes"),
) -> tuple[SketchFactory, type]:
    """Normalise a :class:`SketchSpec` or zero-argument factory; return ``(factory, sketch_type)``.

    A plain factory is called once, here, so that invalid sketch parameters fail at pipeline
    construction rather than in a worker.
    """
    if isinstance(spec_or_factory, SketchSpec):
        return spec_or_factory, spec_or_factory.sketch_type
    if not callable(spec_or_factory):
        raise ValueError(
            "sketch must be a SketchSpec or a zero-argument callable returning an empty sketch, "
            f"got {type(spec_or_factory).__name__}"
        )
    probe = spec_or_factory()
    for method in required:
        if not callable(getattr(probe, method, None)):
            raise ValueError(
                f"sketch factory returned a {type(probe).__name__}, which has no {method}()"
            )
    return spec_or_factory, type(probe)


class SketchCoder(coders.Coder):
    """Encodes sketches of one class with their versioned ``to_bytes``/``from_bytes`` format.

    Not deterministic: two equal Misra-Gries sketches can hold their zero-count keys in a
    different order, and sketches are never GroupByKey keys anyway.
    """

    def __init__(self, sketch_type: type):
        self._sketch_type = sketch_type

    def encode(self, value: Any) -> bytes:
        return value.to_bytes()

    def decode(self, encoded: bytes) -> Any:
        return self._sketch_type.from_bytes(encoded)

    def is_deterministic(self) -> bool:
        return False

    def to_type_hint(self) -> type:
        return self._sketch_type

    @classmethod
    def from_type_hint(cls, typehint: Any, registry: Any) -> SketchCoder:
        return cls(typehint)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._sketch_type is self._sketch_type

    def __hash__(self) -> int:
        return hash_key((type(self).__name__, self._sketch_type.__name__), 0)[0]

    def __repr__(self) -> str:
        return f"SketchCoder({self._sketch_type.__name__})"


for _sketch_type in SKETCH_KINDS.values():
    # Lets a PCollection typed with a sketch class (SketchGlobally's output) use SketchCoder.
    coders.registry.register_coder(_sketch_type, SketchCoder)


class SketchCombineFn(beam.CombineFn):
    """Build one exact sketch from batches of keys.

    Parameters
    ----------
    sketch
        A :class:`SketchSpec`, or a zero-argument callable returning an empty sketch (any class
        with ``update``, ``merge``, ``to_bytes`` and classmethod ``from_bytes``).

    Notes
    -----
    ``add_input`` accepts a batch (numpy array, pyarrow array or list of keys) or a single key
    (anything else, including a tuple, which is a composite key). The accumulator is the sketch
    itself; ``merge_accumulators`` merges into the first accumulator and never mutates the
    others (merging an empty Misra-Gries sketch is the identity). For Misra-Gries the result then depends on Beam's merge tree, within
    the merged error bound ``f(x) - n/(k+1) <= estimate(x) <= f(x)``.
    """

    #: Methods the sketches of this CombineFn must have (checked at pipeline construction).
    REQUIRED_METHODS: tuple[str, ...] = ("update", "merge", "to_bytes", "from_bytes")

    def __init__(self, sketch: SketchSpec | SketchFactory):
        super().__init__()
        # Only the small spec/factory is pickled with the CombineFn; tables are built per
        # accumulator on the worker (a big array on the instance slows every bundle).
        self._factory, self._sketch_type = as_sketch_factory(sketch, self.REQUIRED_METHODS)

    @property
    def sketch_type(self) -> type:
        """The class of the sketches this CombineFn builds."""
        return self._sketch_type

    @classmethod
    def count_min(cls, width: int, depth: int, seed: int = 0) -> SketchCombineFn:
        """CombineFn building a :class:`~beam_dpsketch.sketches.CountMinSketch`."""
        return cls(SketchSpec.count_min(width, depth, seed))

    @classmethod
    def count_sketch(cls, width: int, depth: int, seed: int = 0) -> SketchCombineFn:
        """CombineFn building a :class:`~beam_dpsketch.sketches.CountSketch`."""
        return cls(SketchSpec.count_sketch(width, depth, seed))

    @classmethod
    def count_median(cls, width: int, depth: int, seed: int = 0) -> SketchCombineFn:
        """CombineFn building a :class:`~beam_dpsketch.sketches.CountMedianSketch`."""
        return cls(SketchSpec.count_median(width, depth, seed))

    @classmethod
    def misra_gries(cls, k: int) -> SketchCombineFn:
        """CombineFn building a :class:`~beam_dpsketch.sketches.MisraGries` summary."""
        return cls(SketchSpec.misra_gries(k))

    def create_accumulator(self) -> Sketch:
        return self._factory()

    def add_input(self, mutable_accumulator: Sketch, element: Any) -> Sketch:
        if is_key_batch(element) or isinstance(element, list):
            return mutable_accumulator.update(element)
        return mutable_accumulator.update([element])

    def merge_accumulators(self, accumulators: Iterable[Sketch]) -> Sketch:
        # Beam allows mutating only the first accumulator; sketches merge in place. The streaming
        # runner merges *no* accumulators for an empty ON_TIME pane after early firings in
        # DISCARDING mode: that pane's sketch is the empty one.
        it = iter(accumulators)
        first = next(it, None)
        if first is None:
            return self.create_accumulator()
        for acc in it:
            first.merge(acc)
        return first

    def compact(self, accumulator: Sketch) -> Sketch:
        return accumulator

    def extract_output(self, accumulator: Sketch) -> Sketch:
        return accumulator

    def get_accumulator_coder(self) -> SketchCoder:
        return SketchCoder(self._sketch_type)


class MergeSketchesCombineFn(SketchCombineFn):
    """Combine sketches that were already built (e.g. one per ``GroupByKey`` shard or user).

    ``add_input`` merges the incoming sketch into the accumulator; since merging an empty sketch
    is the identity, a window holding one sketch yields exactly that sketch.
    """

    REQUIRED_METHODS = ("merge", "to_bytes", "from_bytes")

    def add_input(self, mutable_accumulator: Sketch, element: Any) -> Sketch:
        return mutable_accumulator.merge(element)


class WeightedSketchCombineFn(SketchCombineFn):
    """Inputs are ``(keys, counts)``: one key and its integer weight, or arrays of both.

    Negative weights are deletions (turnstile model) for the sketches that allow them; ``counts``
    may be ``None`` for unit weights.
    """

    def add_input(self, mutable_accumulator: Sketch, element: Any) -> Sketch:
        keys, counts = element
        if not isinstance(keys, np.ndarray | list):
            return mutable_accumulator.update([keys], [counts])
        return mutable_accumulator.update(keys, counts)
