"""What one continual release is and says: the time models and their neighbouring relations,
the release record, the mechanism name and the release-id prefix."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from beam_dpsketch.transforms.release import release_id_for

TIME_MODELS = ("element", "pane")

#: The neighbouring relation of the element time model (Holland, Theorem 2).
ELEMENT_RELATION = (
    "replace the key of one arrival; every arrival's position and event timestamp (hence its "
    "window) public and unchanged (add/remove is not covered: it shifts every later position)"
)


def pane_relation(max_contributions: int) -> str:
    """The neighbouring relation of the pane time model (one pane: the whole global window)."""
    return (
        f"add, remove or replace up to {max_contributions} arrival(s) of the input (the single "
        "pane of the global window, one time step)"
    )


@dataclass(frozen=True)
class ContinualRelease:
    """One release of a :class:`ContinualDPSketch` (``with_metadata=True``): noisy estimates
    after time step ``t``, with the public facts of the release it belongs to.

    Every field is public information or noisy output; exact counts are never released. The
    fields shared with :class:`~beam_dpsketch.transforms.release.Release` (``transform``,
    ``window_start``, ``window_end``, ``mechanism``, ``epsilon``, ``delta``, ``noise_scale``)
    mean the same there: the release here is the whole time series of one window.

    Attributes
    ----------
    transform
        Label of the releasing transform (part of the noise's release-id prefix).
    window_start, window_end
        Window bounds in seconds; ``None`` for the global window.
    t
        Time steps processed so far (``1..horizon``): the release is the sketch's output after
        step ``t - 1`` (0-indexed), i.e. after ``t`` arrivals (element model) or ``t`` panes.
    horizon
        The declared horizon ``T`` of the calibration.
    time_model
        ``"element"`` or ``"pane"``.
    sketch
        ``"count-min"`` or ``"count-sketch"``.
    algorithm
        ``"lazy"`` or ``"punctual"``.
    width, depth
        Sketch shape.
    mechanism
        Mechanism name (as in the accountant's report).
    epsilon, delta
        Cost of the release this record belongs to: the ``(epsilon, delta)`` of this window's
        whole time series (all ``T`` steps, every record of the window), not per record.
    noise_scale
        Standard deviation of the Gaussian noise of one tree node.
    neighbouring_relation
        The neighbouring relation the guarantee holds for (from the time model).
    answers
        ``{query key: noisy estimate}`` for the declared public query keys.
    noisy_table
        The released ``(depth, width)`` noisy table (``with_table=True``), else ``None``. Not
        part of equality.
    """

    transform: str
    window_start: float | None
    window_end: float | None
    t: int
    horizon: int
    time_model: str
    sketch: str
    algorithm: str
    width: int
    depth: int
    mechanism: str
    epsilon: float
    delta: float
    noise_scale: float
    neighbouring_relation: str
    answers: Mapping[Any, float]
    noisy_table: np.ndarray | None = field(default=None, compare=False, repr=False)


def mechanism_name(sketch: str, algorithm: str) -> str:
    """The mechanism name of a continual ``sketch`` / ``algorithm`` pair (accountant, metadata)."""
    return f"continual {algorithm} {sketch} (Gaussian binary mechanism)"


def continual_release_prefix(label: str, window: Any) -> tuple[Any, ...]:
    """The release-id prefix of the continual sketch of ``window`` in the transform ``label``.

    ``release_id_for(label, window, 0)``: the window's time series is one release (pane 0 of the
    release-id scheme), and the core sketch keys every tree node's noise under this prefix.
    """
    return release_id_for(label, window, 0)
