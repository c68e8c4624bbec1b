"""The Beam YAML step ``DPTopKeys``: the top keys of a field with no candidate list."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import apache_beam as beam

from beam_dpsketch.checks import check_int
from beam_dpsketch.transforms import DPTopKeys, DPTransform
from beam_dpsketch.yaml.config import check_field
from beam_dpsketch.yaml.transforms import HEAVY_HITTER_FIELDS, YamlDPTransform, field_type

__all__ = ["YamlDPTopKeys"]


def _top_key_values(record: Any) -> list[dict[str, Any]]:
    # A BoundedKeyEstimate: the bound's fields are always present.
    return [
        {
            "key": record.key,
            "estimate": float(record.estimate),
            "lower": float(record.lower),
            "upper": float(record.upper),
            "confidence": float(record.confidence),
        }
    ]


class YamlDPTopKeys(YamlDPTransform):
    """DP top keys of a field's values with no candidate list (``DPTopKeys``).

    Rows: ``key`` (the type of the ``key`` field), ``estimate``, ``lower``, ``upper`` and
    ``confidence``, largest first, plus the window fields when windowed.

    Parameters
    ----------
    key
        The field whose values are counted.
    k
        Keys released per window and pane (default 10).
    max_key_bytes, width, depth, beam, sketch, seed
        As for :class:`~beam_dpsketch.transforms.DPTopKeys` (defaults 16, 2048, 5, ``32 k``,
        ``count-sketch``, 0).
    epsilon
        The transform's epsilon.
    delta
        The transform's delta.
    accountant
        A shared accountant ``{name, epsilon, delta}``.
    privacy_unit
        ``{max_windows}`` (element level).
    windowing
        ``{max_panes_per_window, data_independent_panes, release_range}``.
    label
        The release's name.
    insecure_test_noise_key
        INSECURE seeded noise, tests only.

    Notes
    -----
    **Privacy guarantee.** That of :class:`~beam_dpsketch.transforms.DPTopKeys` with these
    parameters (derived here, docs/algorithms.md#top-keys); the rows are post-processing of its
    release.
    """

    def __init__(
        self,
        key: str,
        k: int = 10,
        max_key_bytes: int = 16,
        width: int = 2048,
        depth: int = 5,
        beam: int | None = None,
        sketch: str = "count-sketch",
        seed: int = 0,
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
        self.k = check_int(k, "k")
        self.options: dict[str, Any] = {
            "max_key_bytes": max_key_bytes,
            "width": width,
            "depth": depth,
            "beam": beam,
            "sketch": sketch,
            "seed": seed,
        }
        # Every parameter is checked now, at construction, naming its key.
        DPTopKeys(self.k, self.budget, **self.options)

    def build(self, pcoll: beam.PCollection, **common: Any) -> DPTransform:
        field_type(pcoll, self.key, "key")
        budget = common.pop("budget")
        return DPTopKeys(
            self.k,
            budget,
            key_fn=self.key,
            privacy_unit=self.privacy_unit,
            windowing=self.windowing,
            **self.options,
            **common,
        )

    def row_fields(self, pcoll: beam.PCollection) -> list[tuple[str, Any]]:
        return [("key", field_type(pcoll, self.key, "key")), *HEAVY_HITTER_FIELDS]

    def converter(self) -> Callable[[Any], list[dict[str, Any]]]:
        return _top_key_values
