"""The clocks and the noise owner both query modes share: the single-key use-and-keep core's configuration, noise-stream id and answer records.

One module, so that the schedule mode (:mod:`~beam_dpsketch.transforms.intermittent.schedule`),
the event-time mode (:mod:`~beam_dpsketch.transforms.intermittent.event_time`) and the transform
(:mod:`~beam_dpsketch.transforms.intermittent.transform`) build the one noise owner the same way
and state the same guarantee.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.intermittent.sketch import UseAndKeepSketch
from beam_dpsketch.transforms.records import IntermittentRecord, TimedEstimate

__all__ = [
    "CLOCKS",
    "CLOCK_SPLIT",
    "SINGLE_KEY",
    "SKETCHES",
    "CoreConfig",
    "answer_records",
    "intermittent_sketch_id",
]

#: ``sketch`` names of the transform and the core ``kind`` each maps to.
SKETCHES = {"count-sketch": "count-sketch", "count-min": "count-min"}

#: The clocks a caller can declare, and the neighbouring relation each one's guarantee holds for
#: (:mod:`beam_dpsketch.transforms.intermittent`, "Clocks and neighbouring relations").
CLOCKS: dict[str, str] = {
    "event_time": "add/remove one element; every other element's time unchanged",
    "positions": (
        "replace one element (its key) at a fixed position; every position unchanged "
        "(add/remove is not covered: it renumbers later positions)"
    ),
}

#: Factor between a clock's per-element add/remove loss and its claimed relation: under
#: "positions" a replacement is one removal plus one addition in the same interval, so the cells
#: are calibrated for ``epsilon / 2``.
CLOCK_SPLIT = {"event_time": 1, "positions": 2}
#: The core's ``neighbouring`` for each clock.
_CLOCK_NEIGHBOURING = {"event_time": "add_remove", "positions": "replace"}

#: Every delta and query of one transform goes to this single key (one noise owner, P-7).
SINGLE_KEY = 0


def intermittent_sketch_id(label: str) -> tuple[str, str]:
    """The public ``sketch_id`` (noise-stream prefix) of the transform labelled ``label``.

    Feeding a :class:`~beam_dpsketch.sketches.intermittent.sketch.UseAndKeepSketch` built with this id
    and the same noise source the same deltas reproduces the transform's answers exactly.
    """
    if not isinstance(label, str) or not label:
        raise ValueError(f"label must be a non-empty string, got {label!r}")
    return ("dp-intermittent", label)


def answer_records(
    answer: Any, keys: Any, t: Any, with_metadata: bool, config: CoreConfig
) -> Iterator[Any]:
    """The records of one answered batch; ``config.split`` turns the core's add/remove epsilon
    into the guarantee under the clock's relation."""
    estimates = answer.estimates.tolist()
    if not with_metadata:
        for key, est in zip(keys, estimates, strict=True):
            yield TimedEstimate(t, key, est)
        return
    stds = answer.noise_std.tolist()
    epsilon = answer.epsilon_total * config.split
    for key, est, std in zip(keys, estimates, stds, strict=True):
        yield IntermittentRecord(
            t, key, est, answer.batch, std, epsilon, config.mechanism, CLOCKS[config.clock]
        )


@dataclass(frozen=True)
class CoreConfig:
    """What every worker needs to build the single-key core (small, picklable).

    ``budget`` is the transform's pure budget under the relation of ``clock``; the core is
    built for that relation (``neighbouring="replace"`` for the positions clock), so its
    add/remove epsilon is the budget divided by ``split``.
    """

    width: int
    depth: int
    budget: PrivacyBudget
    clock: str
    kind: str
    seed: int
    sketch_id: tuple[str, str]
    noise_source: NoiseSource
    mechanism: str

    @property
    def split(self) -> int:
        """Factor from the core's add/remove epsilon to the clock's relation (:data:`CLOCK_SPLIT`)."""
        return CLOCK_SPLIT[self.clock]

    def new(self, quiet: bool = True, source: NoiseSource | None = None) -> UseAndKeepSketch:
        """An empty core drawing from ``source`` (a run's source; default: the application's)."""
        with warnings.catch_warnings():
            if quiet:
                # The even-depth warning was shown once, at pipeline construction.
                warnings.simplefilter("ignore", UserWarning)
            return UseAndKeepSketch(
                self.width,
                self.depth,
                self.budget,
                noise_source=self.noise_source if source is None else source,
                release_prefix=self.sketch_id,
                kind=self.kind,
                seed=self.seed,
                neighbouring=_CLOCK_NEIGHBOURING[self.clock],
            )

    def restore(self, data: bytes | None, source: NoiseSource) -> UseAndKeepSketch:
        """The core saved as ``data`` (an empty one for ``None``), drawing from ``source``."""
        if data is None:
            return self.new(source=source)
        return UseAndKeepSketch.from_bytes(data, source)
