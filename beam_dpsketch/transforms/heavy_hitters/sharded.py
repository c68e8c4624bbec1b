"""Sharded sequential PMG: Design D (shards by key hash) and the untrusted-aggregator baseline.

Both run the Sequential mechanism's release (PMG, Lebeda and Tětek, "Better Differentially
Private Approximate Histograms and Heavy Hitters using the Misra-Gries Sketch", PODS 2023,
Algorithm 2) on each of ``shards`` sequential Algorithm-1 sketches instead of one, so a window's
sketching spreads over ``shards`` keys of keyed state (strict mode: each shard's sub-stream in
arrival order, never merged):

* :class:`DesignD` (``"design-d"``): element ``x`` goes to shard ``H(x) mod s`` (a fixed hash of
  the key); the release is the union of the shards' PMG releases
  (:func:`~beam_dpsketch.sketches.misra_gries.sharded.design_d`), parallel composition;
* :class:`UntrustedShards` (``"untrusted-shards"``): keys arrive as ``(holder, key)`` pairs, each
  holder's elements go to shard ``H(holder) mod s``, and the shards' PMG releases are summed
  per key (:func:`~beam_dpsketch.sketches.misra_gries.sharded.untrusted_sum`): the baseline of
  shards that do not trust the aggregator, whose error grows with ``s``.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any

import apache_beam as beam
from apache_beam import coders

from beam_dpsketch.checks import check_int
from beam_dpsketch.noise import NoiseStream
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.transforms.combiners import MergeSketchesCombineFn, SketchCoder
from beam_dpsketch.transforms.heavy_hitters.mechanism import HeavyHitterMechanism
from beam_dpsketch.transforms.heavy_hitters.sequential import Sequential, sequential_sketch_fn
from beam_dpsketch.transforms.heavy_hitters.sketch_layer import (
    DEFAULT_K,
    ERROR_CONFIDENCE,
    MAX_SHARDS,
    NEIGHBOURING_ELEMENT,
    NEIGHBOURING_HOLDERS,
    HeavyHitterRelease,
    MisraGries,
    ShardedMisraGries,
    design_d,
    split_by_shard,
    untrusted_shard_confidence,
    untrusted_sum,
)
from beam_dpsketch.transforms.windowing_rules import WindowingRequirement

__all__ = ["DEFAULT_SHARDS", "DesignD", "UntrustedShards", "shard_sketch_fn"]

#: Shards when ``shards`` is not given.
DEFAULT_SHARDS = 8

coders.registry.register_coder(ShardedMisraGries, SketchCoder)


def shard_sketch_fn(k: int, shards: int, partition: str) -> beam.DoFn:
    """A stateful ``DoFn`` on ``(shard, keys)``: one Algorithm-1 sketch per shard and window.

    Each shard's sketch lives in keyed state (``O(k)`` bytes), takes the shard's key batches in
    arrival order and leaves, as a one-shard
    :class:`~beam_dpsketch.sketches.misra_gries.sharded.ShardedMisraGries`, when the watermark
    passes the end of the window (:func:`~.sequential.sequential_sketch_fn`, keyed by shard).
    """

    def one_shard(shard: Any, sketch: MisraGries) -> ShardedMisraGries:
        return ShardedMisraGries(k, shards, partition).add_shard(int(shard), sketch)

    return sequential_sketch_fn(k, finish=one_shard)


def split_keys(batch: Any, shards: int) -> list[tuple[int, Any]]:
    """Design D's split of a key batch: ``(H(key) mod shards, keys)`` in arrival order."""
    return split_by_shard(batch, shards)


def split_holders(batch: Any, shards: int) -> list[tuple[int, Any]]:
    """The untrusted split of a batch of ``(holder, key)`` pairs: ``(H(holder) mod shards,
    keys)`` in arrival order.

    Raises ``TypeError`` naming the type of a key that is not such a pair.
    """
    pairs = batch.tolist() if hasattr(batch, "tolist") else list(batch)
    for pair in pairs:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise TypeError(
                "mechanism 'untrusted-shards' takes (holder, key) pairs as keys (key_fn "
                f"returning the data holder and the key), got a key of type {type(pair).__name__}"
            )
    return split_by_shard([p[1] for p in pairs], shards, by=[p[0] for p in pairs])


class _ShardedPMG(HeavyHitterMechanism):
    """What Design D and the untrusted baseline share: shards, keyed state, PMG per shard."""

    # The shard sketches live in keyed state and leave on an end-of-window timer.
    needs_state_and_timers = True
    partition: str

    def __init__(self, k: int | None = None, shards: int = DEFAULT_SHARDS) -> None:
        super().__init__(DEFAULT_K if k is None else k)
        self.shards = check_int(shards, "shards", lower=1, upper=MAX_SHARDS)
        ShardedMisraGries(self.k, self.shards, self.partition)  # checks k with shards

    def parameters(self) -> dict[str, Any]:
        return {"k": self.k, "shards": self.shards}

    def display_parameters(self) -> dict[str, Any]:
        return {"shards": self.shards}

    def combine_fn(self) -> beam.CombineFn:
        k, s, partition = self.k, self.shards, self.partition
        return MergeSketchesCombineFn(lambda: ShardedMisraGries(k, s, partition))

    @abc.abstractmethod
    def split(self, batch: Any) -> list[tuple[int, Any]]:
        """``(shard, keys)`` pairs of one input batch, in arrival order."""

    def prepare(self, keys: beam.PCollection) -> beam.PCollection:
        return (
            keys
            | "SplitShards" >> beam.FlatMap(self.split)
            | "ShardSketch"
            >> beam.ParDo(shard_sketch_fn(self.k, self.shards, self.partition))
            .with_input_types(tuple[int, Any])
            .with_output_types(ShardedMisraGries)
        )

    def sharded_facts(self, budget: PrivacyBudget) -> dict[str, Any]:
        """The per-shard PMG calibration (the Sequential mechanism's, at the full budget)."""
        out = Sequential(self.k).calibration(budget)
        out["sensitivity"] = (
            f"Lebeda and Tetek, Lemma 6 per shard ({self.shards} shards, parallel composition)"
        )
        out["shards"] = self.shards
        return out

    def windowing_requirement(self, defaulted_by: str | None = None) -> WindowingRequirement:
        # As for the sequential release: several panes would merge a shard's sketches.
        return dataclasses.replace(
            Sequential(self.k).windowing_requirement(defaulted_by),
            who=f"mechanism {self.key!r}",
            why="it releases one sequential Algorithm-1 sketch per shard and window",
        )


class DesignD(_ShardedPMG):
    """Design D (element level, strict mode): key-hash shards, PMG per shard, the union.

    Element ``x`` reaches shard ``H(x) mod shards`` (a fixed public hash of the key), whose
    Algorithm-1 sketch takes its elements in arrival order in keyed state; at the end of the
    window every shard's sketch is released with PMG (discrete noise on the lattice, per-value
    error bounds, as :class:`Sequential`) on noise of its own, and the release is the union of
    the shards' released keys (cut to ``top`` by the transform, post-processing). Each shard's
    sketch counts only its own keys, so its error ``n_j/(k+1)`` is about ``1/shards`` of one
    sketch's; the windowing must fire once per window, as for :class:`Sequential`.

    Parameters
    ----------
    k
        Counters per shard (default
        :data:`~beam_dpsketch.sketches.misra_gries.DEFAULT_K`); up to ``shards * k`` keys.
    shards
        Number of shards ``s`` (default :data:`DEFAULT_SHARDS`), at most 4096: the sketching
        of a window spreads over ``s`` state keys.

    Notes
    -----
    **Privacy guarantee.** ``(epsilon, delta)``-DP per release under add/remove of one element:
    removing an element changes only its key's shard, by that deletion; PMG on a shard is
    ``(epsilon, delta)``-DP (Lebeda and Tětek, Algorithm 2, Lemmas 3-6) and the shards' noise is
    independent, so the releases compose in parallel (derived here,
    ``docs/algorithms.md#mg-design-d``). Element level only: one user's elements can reach
    several shards, which parallel composition does not cover.
    """

    key = "design-d"
    partition = "key"

    def split(self, batch: Any) -> list[tuple[int, Any]]:
        return split_keys(batch, self.shards)

    def release_object(
        self, accumulator: Any, budget: PrivacyBudget, stream: NoiseStream
    ) -> HeavyHitterRelease:
        return design_d(accumulator, budget, stream, error_confidence=ERROR_CONFIDENCE)

    def calibration(self, budget: PrivacyBudget) -> dict[str, Any]:
        out = self.sharded_facts(budget)
        out["neighbouring_relation"] = NEIGHBOURING_ELEMENT
        out["most_keys"] = self.shards * self.k
        out["error_bound"] = (
            f"per key, with probability >= {ERROR_CONFIDENCE:g}: f(x) in [count - t, count + t "
            "+ s], t the noise quantile of one shard's PMG, s the largest of the shards' "
            "bounds on their sketch's undercount (each 0 when the shard's test finds its "
            "sketch exact, else its noisy upper bound on the shard's rows/(k+1)); computed "
            "from released values only"
        )
        return out


class UntrustedShards(_ShardedPMG):
    """The untrusted-aggregator baseline (element level): PMG per data holder, summed.

    Keys arrive as ``(holder, key)`` pairs (a ``key_fn`` returning the data holder that owns
    the element, e.g. a site or organisation, and the key); holder ``h``'s elements reach shard
    ``H(h) mod shards``, whose sketch takes them in arrival order in keyed state. At the end of
    the window each shard releases PMG on its own noise, and the released values of each key
    are added over the shards (0 where a shard did not release it): the aggregator needs only
    the shards' releases. The error grows with ``shards``: up to ``s`` noise terms per key and
    up to ``s - 1`` shards that keep the key under their threshold. A comparison point for
    Design D and Design B ([LT23, Section 7]); the windowing must fire once per window.

    Parameters
    ----------
    k
        Counters per shard (default :data:`~beam_dpsketch.sketches.misra_gries.DEFAULT_K`).
    shards
        Number of shards ``s`` (default :data:`DEFAULT_SHARDS`), at most
        :func:`~beam_dpsketch.sketches.misra_gries.sharded.max_untrusted_shards` (24) so that
        every summed value can state its error bound at 95 %.

    Notes
    -----
    **Privacy guarantee.** ``(epsilon, delta)``-DP per release under add/remove of one element,
    which belongs to one holder: each shard's PMG release is ``(epsilon, delta)``-DP for its own
    elements (Lebeda and Tětek, Lemma 6), the shards hold disjoint elements, and the sum is
    post-processing of the shards' releases (parallel composition). Element level only.
    """

    key = "untrusted-shards"
    partition = "holder"

    def __init__(self, k: int | None = None, shards: int = DEFAULT_SHARDS) -> None:
        super().__init__(k, shards)
        # Every summed value states a bound at ERROR_CONFIDENCE (union bound over the shards).
        untrusted_shard_confidence(ERROR_CONFIDENCE, self.shards)

    def split(self, batch: Any) -> list[tuple[int, Any]]:
        return split_holders(batch, self.shards)

    def release_object(
        self, accumulator: Any, budget: PrivacyBudget, stream: NoiseStream
    ) -> HeavyHitterRelease:
        return untrusted_sum(accumulator, budget, stream, error_confidence=ERROR_CONFIDENCE)

    def calibration(self, budget: PrivacyBudget) -> dict[str, Any]:
        out = self.sharded_facts(budget)
        out["neighbouring_relation"] = NEIGHBOURING_HOLDERS
        out["error_bound"] = (
            f"per key, with probability >= {ERROR_CONFIDENCE:g}: f(x) in [count - s t, count + "
            f"s t + (s - 1) threshold + sum of the shards' sketch shortfalls], s = "
            f"{self.shards} shards, t each shard's noise quantile at confidence "
            f"1 - {1 - ERROR_CONFIDENCE:g}/s; computed from released values only"
        )
        return out
