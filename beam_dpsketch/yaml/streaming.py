"""The repeated-release transforms as Beam YAML steps: continual, sliding-window, intermittent.

Each class builds the library transform of the same name (:mod:`beam_dpsketch.transforms`) from
plain configuration, as :mod:`beam_dpsketch.yaml.transforms` does for the single-release ones,
and releases its typed records as rows. They take the common keys ``epsilon``, ``delta``,
``accountant``, ``label`` and ``insecure_test_noise_key``. Their clock is the mechanism's (see each
library transform), so ``windowing`` is not a key of theirs; ``ContinualDPSketch`` takes a
``privacy_unit`` for the contribution bound of its pane model, the others protect one element.
"""

from collections.abc import Callable, Sequence
from typing import Any

import apache_beam as beam

from beam_dpsketch.checks import check_int, check_real
from beam_dpsketch.transforms import (
    ContinualDPSketch,
    DPIntermittentQueries,
    DPSlidingWindowFrequencies,
    DPTransform,
)
from beam_dpsketch.transforms.sliding import SlidingLayout
from beam_dpsketch.yaml.config import check_field
from beam_dpsketch.yaml.transforms import YamlDPTransform, field_type

__all__ = [
    "YamlContinualDPSketch",
    "YamlDPIntermittentQueries",
    "YamlDPSlidingWindowFrequencies",
]


def _keys(value: Any, key: str, *, required: bool = False) -> list[Any] | None:
    """A list of public keys given under configuration key ``key`` (``None`` if absent)."""
    if value is None and not required:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence) or not value:
        raise ValueError(f"{key} must be a non-empty list of public keys, got {value!r}")
    return list(value)


def _timed_values(record: Any) -> list[dict[str, Any]]:
    return [{"time": float(record[0]), "key": record[1], "estimate": float(record[2])}]


def _timed_heavy_hitter_values(record: Any) -> list[dict[str, Any]]:
    time = float(record[0])
    return [{"time": time, "key": key, "estimate": float(est)} for key, est in record[1]]


def _step_values(record: Any) -> list[dict[str, Any]]:
    return [{"step": int(record.step), "key": record.key, "estimate": float(record.estimate)}]


def _position_and_key(position: str, key: str) -> Callable[[Any], tuple[Any, Any]]:
    def pair(row: Any) -> tuple[Any, Any]:
        return getattr(row, position), getattr(row, key)

    return pair


class YamlContinualDPSketch(YamlDPTransform):
    """Continual observation of declared keys (``ContinualDPSketch``): one row per release.

    Rows: ``step`` (the time steps processed), ``key`` (a declared query key) and ``estimate``
    (float), after every ``release_every`` steps up to ``horizon``.

    Parameters
    ----------
    width, depth, horizon
        Sketch shape and the number of time steps ``T`` the series covers.
    query_keys
        The public keys whose estimates every release carries.
    key
        The field of the key.
    position
        Element model: the field of each row's public position, its time step (numbered as the
        library transform numbers them, below ``horizon``).
    time_model
        ``"element"`` (default: one step per row, at ``position``) or ``"pane"`` (one step for
        the whole input, in the global window).
    sketch, algorithm, release_every, seed, calibration, cs_sensitivity
        As for the library transform.
    privacy_unit
        Pane model: ``{id: <field>, max_contributions: m}``, the bound on one unit's arrivals in
        the pane, which the caller enforces upstream (element level when left out; the element
        model protects the key of one arrival and takes no bound).
    epsilon, delta, accountant, label, insecure_test_noise_key
        The common keys of :mod:`beam_dpsketch.yaml.transforms`.

    Notes
    -----
    **Privacy guarantee.** That of :class:`~beam_dpsketch.transforms.ContinualDPSketch` with
    these parameters (its docstring: the element model protects the key of one arrival, every
    position public); the rows are post-processing of its releases.
    """

    def __init__(
        self,
        width: int,
        depth: int,
        horizon: int,
        query_keys: list[Any],
        key: str,
        position: str | None = None,
        time_model: str = "element",
        sketch: str = "count-min",
        algorithm: str = "lazy",
        release_every: int = 1,
        seed: int = 0,
        calibration: str | None = None,
        cs_sensitivity: str | None = None,
        privacy_unit: dict[str, Any] | None = None,
        epsilon: float | None = None,
        delta: float | None = None,
        accountant: dict[str, Any] | None = None,
        label: str | None = None,
        insecure_test_noise_key: int | None = None,
    ) -> None:
        super().__init__(
            epsilon=epsilon,
            delta=delta,
            accountant=accountant,
            privacy_unit=privacy_unit,
            label=label,
            insecure_test_noise_key=insecure_test_noise_key,
        )
        self.key = check_field(key, "key")
        self.position = check_field(position, "position", required=time_model == "element")
        self.query_keys = _keys(query_keys, "query_keys", required=True)
        self.shape = (check_int(width, "width"), check_int(depth, "depth"))
        self.horizon = check_int(horizon, "horizon")
        options: dict[str, Any] = {
            "time_model": time_model,
            "sketch": sketch,
            "algorithm": algorithm,
            "release_every": check_int(release_every, "release_every"),
            "seed": check_int(seed, "seed", lower=0),
        }
        if calibration is not None:
            options["calibration"] = calibration
        if cs_sensitivity is not None:
            options["cs_sensitivity"] = cs_sensitivity
        self.options = options

    def prepare(self, pcoll: beam.PCollection) -> beam.PCollection:
        if self.options["time_model"] != "element":
            return pcoll
        # The element model reads (position, key) pairs; the fields are public declarations.
        return pcoll | "PositionAndKey" >> beam.Map(_position_and_key(self.position, self.key))

    def build(self, pcoll: beam.PCollection, **common: Any) -> DPTransform:
        field_type(pcoll, self.key, "key")
        if self.options["time_model"] == "element":
            field_type(pcoll, self.position, "position")
        budget = common.pop("budget")
        key_fn = None if self.options["time_model"] == "element" else self.key
        return ContinualDPSketch(
            *self.shape,
            self.horizon,
            budget,
            query_keys=self.query_keys,
            key_fn=key_fn,
            privacy_unit=self.privacy_unit,
            **self.options,
            **common,
        )

    def row_fields(self, pcoll: beam.PCollection) -> list[tuple[str, Any]]:
        return [("step", int), ("key", field_type(pcoll, self.key, "key")), ("estimate", float)]

    def converter(self) -> Callable[[Any], list[dict[str, Any]]]:
        return _step_values


class YamlDPSlidingWindowFrequencies(YamlDPTransform):
    """DP counts or heavy hitters of the last ``window`` steps (``DPSlidingWindowFrequencies``).

    Rows: ``time`` (the query position, or the event time in seconds that ends the queried
    window), ``key`` and ``estimate`` (float): every query key at every query time, or, with
    ``candidates``, every candidate that passes the heavy-hitter threshold at that time (a time
    with none has no row).

    Parameters
    ----------
    window, width, depth, release_every
        Window length in steps, Count-Min shape, and the public query period.
    key
        The field of the key.
    mode
        ``"count"`` (default: rows carry a public, gap-free ``position``) or ``"time"`` (steps of
        ``time_unit`` seconds of event time from ``origin``; ``time`` names a field of seconds,
        else each row's timestamp is used).
    position, time, time_unit, origin
        As ``position_fn``, ``time_fn``, ``time_unit`` and ``origin`` of the library transform.
    query_keys
        Public keys to estimate at every query time; or
    candidates, gamma, hh_slack
        A public candidate domain and the heavy-hitter fraction.
    seed, preset
        Public hash seed; ``"theory"`` or ``"paper_experiments"``.
    epsilon, delta, accountant, label, insecure_test_noise_key
        The common keys of :mod:`beam_dpsketch.yaml.transforms` (``(epsilon, delta)`` is
        converted to ``rho``-zCDP; pure DP is refused).

    Notes
    -----
    **Privacy guarantee.** That of :class:`~beam_dpsketch.transforms.DPSlidingWindowFrequencies`
    with these parameters (replace-one neighbours over the whole stream); the rows are
    post-processing of its answers.
    """

    def __init__(
        self,
        window: int,
        width: int,
        depth: int,
        release_every: int,
        key: str,
        mode: str = "count",
        position: str | None = None,
        time: str | None = None,
        time_unit: float = 1,
        origin: float | None = None,
        query_keys: list[Any] | None = None,
        candidates: list[Any] | None = None,
        gamma: float | None = None,
        hh_slack: float | None = None,
        seed: int = 0,
        preset: str | None = None,
        epsilon: float | None = None,
        delta: float | None = None,
        accountant: dict[str, Any] | None = None,
        label: str | None = None,
        insecure_test_noise_key: int | None = None,
    ) -> None:
        super().__init__(
            epsilon=epsilon,
            delta=delta,
            accountant=accountant,
            label=label,
            insecure_test_noise_key=insecure_test_noise_key,
        )
        self.key = check_field(key, "key")
        self.position = check_field(position, "position", required=False)
        self.time = check_field(time, "time", required=False)
        self.shape = (
            check_int(window, "window"),
            check_int(width, "width"),
            check_int(depth, "depth"),
        )
        self.candidates = _keys(candidates, "candidates")
        self.options: dict[str, Any] = {
            "release_every": check_int(release_every, "release_every"),
            "mode": mode,
            "time_unit": check_real(time_unit, "time_unit", 0.0, lower_open=True),
            "origin": origin,
            "query_keys": _keys(query_keys, "query_keys"),
            "candidates": self.candidates,
            "gamma": gamma,
            "hh_slack": hh_slack,
            "seed": check_int(seed, "seed", lower=0),
            "preset": preset,
        }

    def build(self, pcoll: beam.PCollection, **common: Any) -> DPTransform:
        field_type(pcoll, self.key, "key")
        for field, name in ((self.position, "position"), (self.time, "time")):
            if field is not None:
                field_type(pcoll, field, name)
        budget = common.pop("budget")
        options = dict(self.options)
        return DPSlidingWindowFrequencies(
            *self.shape,
            budget,
            key_fn=self.key,
            position_fn=self.position,
            time_fn=self.time,
            layout=SlidingLayout(preset=options.pop("preset")),
            **options,
            **common,
        )

    def row_fields(self, pcoll: beam.PCollection) -> list[tuple[str, Any]]:
        return [("time", float), ("key", field_type(pcoll, self.key, "key")), ("estimate", float)]

    def converter(self) -> Callable[[Any], list[dict[str, Any]]]:
        return _timed_values if self.candidates is None else _timed_heavy_hitter_values


class YamlDPIntermittentQueries(YamlDPTransform):
    """Answers to declared query batches at declared times (``DPIntermittentQueries``).

    Rows: ``time`` (the batch's declared time), ``key`` and ``estimate`` (float), one per
    declared query, duplicates included.

    Parameters
    ----------
    width, depth
        Sketch shape.
    queries
        The declared schedule: a list of ``[time, [key, ...]]`` pairs, fixed without looking at
        the data.
    clock
        ``"event_time"`` or ``"positions"``: what the ``time`` field holds (required).
    key, time
        The fields of the key and of the time.
    sketch, seed
        ``"count-sketch"`` (default) or ``"count-min"``; the public hash seed.
    epsilon, accountant, label, insecure_test_noise_key
        The common keys of :mod:`beam_dpsketch.yaml.transforms` (pure DP only: no ``delta``).

    Notes
    -----
    **Privacy guarantee.** That of :class:`~beam_dpsketch.transforms.DPIntermittentQueries` with
    these parameters (pure ``epsilon`` for the whole stream under the declared clock's relation);
    the rows are post-processing of its answers.
    """

    def __init__(
        self,
        width: int,
        depth: int,
        queries: list[Any],
        clock: str,
        key: str,
        time: str,
        sketch: str = "count-sketch",
        seed: int = 0,
        epsilon: float | None = None,
        delta: float | None = None,
        accountant: dict[str, Any] | None = None,
        label: str | None = None,
        insecure_test_noise_key: int | None = None,
    ) -> None:
        super().__init__(
            epsilon=epsilon,
            delta=delta,
            accountant=accountant,
            label=label,
            insecure_test_noise_key=insecure_test_noise_key,
        )
        self.key = check_field(key, "key")
        self.time = check_field(time, "time")
        if isinstance(queries, str) or not isinstance(queries, Sequence) or not queries:
            raise ValueError(
                f"queries must be a non-empty list of [time, [keys]] pairs, got {queries!r}"
            )
        self.queries = [tuple(q) if isinstance(q, list) else q for q in queries]
        self.shape = (check_int(width, "width"), check_int(depth, "depth"))
        self.options = {"clock": clock, "sketch": sketch, "seed": check_int(seed, "seed", lower=0)}

    def build(self, pcoll: beam.PCollection, **common: Any) -> DPTransform:
        field_type(pcoll, self.key, "key")
        field_type(pcoll, self.time, "time")
        budget = common.pop("budget")
        return DPIntermittentQueries(
            *self.shape,
            budget,
            queries=self.queries,
            key_fn=self.key,
            time_fn=self.time,
            **self.options,
            **common,
        )

    def row_fields(self, pcoll: beam.PCollection) -> list[tuple[str, Any]]:
        return [("time", float), ("key", field_type(pcoll, self.key, "key")), ("estimate", float)]

    def converter(self) -> Callable[[Any], list[dict[str, Any]]]:
        return _timed_values
