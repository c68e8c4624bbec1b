"""``BoundContributions``: the step that makes user-level (privacy-unit-level) privacy hold.

Every DP transform of this library is **element level by default**: neighbouring inputs differ
by one element. To protect a whole *privacy unit* (user, device, account), each unit's influence
must first be bounded: per window, a unit keeps at most ``max_contributions`` elements (and, with
``key_fn`` and ``max_partitions``, elements of at most ``max_partitions`` distinct keys). A DP
transform downstream then calibrates for that bound (e.g. :class:`~beam_dpsketch.transforms.DPCount`
uses sensitivity ``max_contributions``) and reports ``privacy unit: user``.

Which contributions are kept is decided by the keyed hash of
:mod:`beam_dpsketch.privacy.bounding` (BLAKE2b with a secret key): the kept set is a uniform random
subset of the unit's contributions, depends only on that unit's own data (so removing a unit does
not change what anyone else keeps), and is identical on retries and across runs with the same
``selection_key``. The default key comes from ``os.urandom`` at construction, so it is pickled
into the workers and all of them (and every retry) agree.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
from collections.abc import Callable
from typing import Any

import apache_beam as beam
import numpy as np

from beam_dpsketch.checks import check_int
from beam_dpsketch.hashing import encode_key
from beam_dpsketch.privacy.bounding import MIN_KEY_BYTES, bounded_mask
from beam_dpsketch.privacy.declarations import PrivacyUnit
from beam_dpsketch.transforms.base import as_extractor
from beam_dpsketch.transforms.batching import call_user_fn
from beam_dpsketch.transforms.windowing_rules import WindowingRequirement, accept_windowing

__all__ = ["BOUNDED_RELEASE_WINDOWING", "BoundContributions", "canonical_id"]

#: What a DP release after :class:`BoundContributions` needs of the windowing: the bound is per
#: window, so the grouping by privacy unit must fire once per window.
BOUNDED_RELEASE_WINDOWING = WindowingRequirement(
    who="BoundContributions",
    triggers="once",
    why="it bounds each unit per window",
)
# The bounding step alone adds no release, so a single processing-time firing is its caller's
# concern (a DP release after it refuses one).
_BOUNDING_WINDOWING = dataclasses.replace(BOUNDED_RELEASE_WINDOWING, processing_time=True)

_PARTITION_DOMAIN = b"beam-dpsketch/partition-selection/v1"


def canonical_id(value: Any, what: str = "privacy id") -> Any:
    """``value`` as a plain Python ``int``/``str``/``bytes`` (or a tuple of these).

    numpy scalars become Python scalars: numpy keys break ``GroupByKey`` on the FnApiRunner (its
    key coder is not deterministic for them), and the keyed hash needs a canonical
    encoding. Anything else (``None``, floats, lists, dicts, ...) raises ``TypeError`` naming its
    type, so no element is dropped silently.
    """
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | str | bytes):
        return value
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, tuple):
        return tuple(canonical_id(v, what) for v in value)
    raise TypeError(
        f"{what} must be an int, str, bytes or a tuple of these, got {type(value).__name__}"
    )


def _check_key(selection_key: Any) -> bytes:
    if isinstance(selection_key, bytearray):
        selection_key = bytes(selection_key)
    if not isinstance(selection_key, bytes):
        raise TypeError(f"selection_key must be bytes or None, got {type(selection_key).__name__}")
    if len(selection_key) < MIN_KEY_BYTES:
        raise ValueError(
            f"selection_key must have at least {MIN_KEY_BYTES} bytes, got {len(selection_key)}"
        )
    return selection_key


class _KeyByPrivacyId(beam.DoFn):
    def __init__(self, privacy_id_fn: Callable[[Any], Any]) -> None:
        self._privacy_id_fn = privacy_id_fn

    def process(self, element):
        yield canonical_id(call_user_fn(self._privacy_id_fn, element, "privacy_id_fn")), element


class _SelectContributions(beam.DoFn):
    def __init__(
        self,
        selection_key: bytes,
        max_contributions: int,
        key_fn: Callable[[Any], Any] | None,
        max_partitions: int | None,
        element_id_fn: Callable[[Any], Any] | None,
    ) -> None:
        self._key = selection_key
        # A separate PRF key for partitions, so partition ranks are independent of element ranks
        # even when elements are their own partition keys.
        self._partition_key = hmac.new(selection_key, _PARTITION_DOMAIN, hashlib.sha256).digest()
        self._max_contributions = max_contributions
        self._key_fn = key_fn
        self._max_partitions = max_partitions
        self._element_id_fn = element_id_fn

    def _element_id(self, element: Any) -> Any:
        if self._element_id_fn is None:
            return canonical_id(element, "element (pass element_id_fn for other types)")
        element_id = call_user_fn(self._element_id_fn, element, "element_id_fn")
        return canonical_id(element_id, "element_id_fn(element)")

    def process(self, kv):
        privacy_id, values = kv
        items = list(values)
        if self._key_fn is not None:
            items = self._bound_partitions(privacy_id, items)
        ids = [self._element_id(e) for e in items]
        m = self._max_contributions
        if len(items) > m:
            mask = bounded_mask(self._key, [privacy_id] * len(items), ids, m)
            items = [e for e, keep in zip(items, mask.tolist(), strict=True) if keep]
        yield from items

    def _bound_partitions(self, privacy_id: Any, items: list[Any]) -> list[Any]:
        key_fn = self._key_fn
        encoded = [
            encode_key(canonical_id(call_user_fn(key_fn, e, "key_fn"), "key_fn(element)"))  # type: ignore[arg-type]
            for e in items
        ]
        distinct = list(dict.fromkeys(encoded))
        if len(distinct) <= self._max_partitions:  # type: ignore[operator]
            return items
        # Rank the unit's distinct partitions by the keyed hash and keep the smallest ranks.
        mask = bounded_mask(
            self._partition_key,
            [privacy_id] * len(distinct),
            distinct,
            self._max_partitions,  # type: ignore[arg-type]
        )
        kept = {d for d, keep in zip(distinct, mask.tolist(), strict=True) if keep}
        return [e for e, enc in zip(items, encoded, strict=True) if enc in kept]


class BoundContributions(beam.PTransform):
    """Keep at most ``max_contributions`` elements per privacy unit and window.

    Parameters
    ----------
    privacy_id_fn
        Element -> privacy unit id (int, str, bytes or a tuple of these; numpy scalars are
        converted to Python types). Like every extractor here, a callable or the field name of
        ``dict`` / ``beam.Row`` elements. Or a user-level
        :class:`~beam_dpsketch.privacy.PrivacyUnit`, whose ``id`` and ``max_contributions`` are
        used: the same declaration then goes to the DP transform downstream
        (``DPAggregate(..., privacy_unit=unit)``).
    max_contributions
        Maximum elements kept per unit and window (``>= 1``); taken from the unit when
        ``privacy_id_fn`` is a :class:`~beam_dpsketch.privacy.PrivacyUnit`.
    key_fn
        Element -> partition key (e.g. the item a user contributes to). With ``max_partitions``,
        a unit first keeps the elements of at most ``max_partitions`` distinct keys, then at most
        ``max_contributions`` of those.
    max_partitions
        Maximum distinct ``key_fn`` keys per unit and window (required with ``key_fn``).
    selection_key
        Secret key (``>= 16`` bytes) of the keyed-hash selection. Default: 32 bytes from
        ``os.urandom`` drawn at construction. Reuse a key to reproduce a selection across runs;
        keep it secret, or an adversary could craft elements that are always kept.
    element_id_fn
        Element -> stable identity used to rank it (default: the element itself, which must then
        be an int, str, bytes or tuple). Records such as dicts need an id function, e.g. an event
        id; it should be injective, or which of two elements with one id is kept may depend on
        their order.

    Returns
    -------
    PCollection
        The kept elements, each in the window it was bounded in, timestamped at the end of that
        window (``GroupByKey`` semantics). Do not re-window them: a sliding window's selection
        holds for that window only.

    Notes
    -----
    **Privacy.** This step is what makes a downstream DP transform's guarantee hold at the level
    of a privacy unit: after it, removing one unit changes each window's input by at most
    ``max_contributions`` elements (in at most ``max_partitions`` keys) and changes nothing else,
    because a unit's selection depends only on its own contributions. The downstream transform
    must declare the same user-level privacy unit, a sensitivity scaled by the bound, and (for
    non-global windows) the unit's ``max_windows``, which this step does **not** enforce: the bound
    is per window, so the number of windows a unit appears in must be bounded by the data or
    upstream.

    The bound is per window only if the grouping fires once per window, so the input's trigger
    must fire at most once (the default trigger without allowed lateness, ``AfterWatermark()``
    without early or late firings, ...); other triggers are refused at construction.

    **No side channels.** The step publishes no Beam metrics: how many units there are and how
    many contributions or partitions were dropped are exact functions of the data, outside any
    release. Errors name the failing function or the offending type, never an id, key or
    element (a failing ``privacy_id_fn``, ``key_fn`` or ``element_id_fn`` raises ``ValueError``
    naming the function and the exception type only).
    """

    def __init__(
        self,
        privacy_id_fn: Callable[[Any], Any] | str | PrivacyUnit,
        max_contributions: int | None = None,
        *,
        key_fn: Callable[[Any], Any] | None = None,
        max_partitions: int | None = None,
        selection_key: bytes | None = None,
        element_id_fn: Callable[[Any], Any] | None = None,
    ) -> None:
        super().__init__()
        if isinstance(privacy_id_fn, PrivacyUnit):
            unit = privacy_id_fn
            if not unit.is_user_level:
                raise ValueError(
                    "privacy_id_fn: BoundContributions bounds a user-level unit; give "
                    "PrivacyUnit(id=..., max_contributions=...)"
                )
            if max_contributions is not None:
                raise TypeError(
                    "max_contributions: give it in the PrivacyUnit, not as a separate parameter"
                )
            privacy_id_fn, max_contributions = unit.id, unit.max_contributions  # type: ignore[assignment]
        privacy_id_fn = as_extractor(privacy_id_fn, "privacy_id_fn")
        if privacy_id_fn is None:
            raise TypeError("privacy_id_fn must be a callable or a field name, got None")
        key_fn = as_extractor(key_fn, "key_fn")
        element_id_fn = as_extractor(element_id_fn, "element_id_fn")
        self._max_contributions = check_int(max_contributions, "max_contributions")
        if (key_fn is None) != (max_partitions is None):
            raise ValueError("key_fn and max_partitions must be given together")
        self._max_partitions = (
            None if max_partitions is None else check_int(max_partitions, "max_partitions")
        )
        self._selection_key = os.urandom(32) if selection_key is None else _check_key(selection_key)
        self._privacy_id_fn = privacy_id_fn
        self._key_fn = key_fn
        self._element_id_fn = element_id_fn

    @property
    def max_contributions(self) -> int:
        """The per-unit, per-window bound."""
        return self._max_contributions

    @property
    def max_partitions(self) -> int | None:
        """The per-unit, per-window bound on distinct keys (``None`` if not bounded)."""
        return self._max_partitions

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        accept_windowing(pcoll.windowing, None, name=self.label, requirement=_BOUNDING_WINDOWING)
        keyed = pcoll | "KeyByPrivacyId" >> beam.ParDo(
            _KeyByPrivacyId(self._privacy_id_fn)
        ).with_output_types(tuple[Any, Any])
        grouped = keyed | "GroupByPrivacyId" >> beam.GroupByKey()
        select = _SelectContributions(
            self._selection_key,
            self._max_contributions,
            self._key_fn,
            self._max_partitions,
            self._element_id_fn,
        )
        # It keeps a subset of its input rows: its output has the input's element type.
        return grouped | "SelectContributions" >> beam.ParDo(select).with_output_types(
            pcoll.element_type or Any
        )
