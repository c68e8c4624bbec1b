"""Query-PCollection mode: one stateful single-key step buffers hashed data and queries and answers each batch once the watermark passes its time.

The queries arrive as a PCollection of ``(time, keys)`` elements, independent of the data; the
data elements' event timestamps are their times.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.coders import BytesCoder, PickleCoder
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import (
    BagStateSpec,
    ReadModifyWriteStateSpec,
    TimerSpec,
    on_timer,
)
from apache_beam.transforms.window import GlobalWindow, GlobalWindows
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from beam_dpsketch.hashing import canonical_key, canonical_keys, hash_keys
from beam_dpsketch.transforms.base import with_run_salt
from beam_dpsketch.transforms.batching import is_key_batch
from beam_dpsketch.transforms.intermittent.noise_owner import SINGLE_KEY, CoreConfig, answer_records
from beam_dpsketch.transforms.intermittent.queries import check_time, query_keys

__all__ = ["expand_event_time"]

_DATA, _QUERY = "data", "query"


class _StampData(beam.DoFn):
    """Hash a bundle's data keys once, with their event times: ``(times_us, (h1, h2))`` batches."""

    def __init__(self, seed: int, key_fn: Any) -> None:
        self._seed, self._key_fn = seed, key_fn

    def start_bundle(self) -> None:
        # Integer arrays hash as arrays; everything else is collected into one list of keys.
        self._int_keys: list[np.ndarray] = []
        self._int_times: list[np.ndarray] = []
        self._keys: list[Any] = []
        self._key_times: list[int] = []

    def process(self, element: Any, timestamp: Any = beam.DoFn.TimestampParam) -> None:
        value = self._key_fn(element) if self._key_fn is not None else element
        micros = int(timestamp.micros)
        if isinstance(value, np.ndarray) and value.dtype.kind == "i" and value.ndim == 1:
            self._int_keys.append(value.astype(np.int64, copy=False))
            self._int_times.append(np.full(value.size, micros, dtype=np.int64))
        elif is_key_batch(value):
            batch = canonical_keys(value)
            self._keys.extend(batch)
            self._key_times.extend([micros] * len(batch))
        else:
            self._keys.append(canonical_key(value))
            self._key_times.append(micros)

    def finish_bundle(self) -> Iterator[WindowedValue]:
        parts = [hash_keys(arr, self._seed) for arr in self._int_keys]
        times = list(self._int_times)
        if self._keys:
            parts.append(hash_keys(self._keys, self._seed))
            times.append(np.asarray(self._key_times, dtype=np.int64))
        self.start_bundle()
        if not parts:
            return
        all_times = np.concatenate(times)
        if all_times.size == 0:
            return
        h1 = np.concatenate([p[0] for p in parts])
        h2 = np.concatenate([p[1] for p in parts])
        # Stamped with the earliest time it holds: the downstream watermark cannot pass any of
        # its elements' times before it is processed.
        stamp = Timestamp(micros=int(all_times.min()))
        yield WindowedValue((SINGLE_KEY, (_DATA, all_times, (h1, h2))), stamp, (GlobalWindow(),))


def _micros(t: float | int) -> int:
    return int(Timestamp.of(t).micros)


class _ParseQuery(beam.DoFn):
    """``(time, keys)`` query elements -> ``(single key, ("query", time, keys))``."""

    def process(self, element: Any) -> Iterator[tuple[int, tuple[str, Any, Any]]]:
        if not isinstance(element, tuple | list) or len(element) != 2:
            raise TypeError(
                f"a query element must be a (time, keys) pair, got {type(element).__name__}"
            )
        t = check_time(element[0], "query time")
        yield SINGLE_KEY, (_QUERY, t, query_keys(element[1], "query keys"))


_SKETCH_STATE = ReadModifyWriteStateSpec("sketch", BytesCoder())
_DATA_STATE = BagStateSpec("data", PickleCoder())
_QUERY_STATE = BagStateSpec("queries", PickleCoder())
_NEXT_STATE = ReadModifyWriteStateSpec("next", PickleCoder())
_LAST_STATE = ReadModifyWriteStateSpec("last", PickleCoder())
# The run salt, for the timer (Beam hands side inputs to process only).
_SALT_STATE = ReadModifyWriteStateSpec("run_salt", BytesCoder())
_ANSWER_TIMER = TimerSpec("answer", TimeDomain.WATERMARK)
# Module-level parameter singletons (Beam reads them from the signature's defaults).
_SKETCH_PARAM = beam.DoFn.StateParam(_SKETCH_STATE)
_DATA_PARAM = beam.DoFn.StateParam(_DATA_STATE)
_QUERY_PARAM = beam.DoFn.StateParam(_QUERY_STATE)
_NEXT_PARAM = beam.DoFn.StateParam(_NEXT_STATE)
_LAST_PARAM = beam.DoFn.StateParam(_LAST_STATE)
_SALT_PARAM = beam.DoFn.StateParam(_SALT_STATE)
_TIMER_PARAM = beam.DoFn.TimerParam(_ANSWER_TIMER)


class _AnswerAtEventTime(beam.DoFn):
    """The single noise owner: buffer hashed data and queries; answer each batch at its time.

    An event-time timer is kept at the earliest pending query time. When it fires, the pending
    batches due by then are answered in time order; before each, the buffered data with event
    times ``<=`` the batch time is added to the core (as one exact delta). Later data stays
    buffered for later batches; data that arrives after its batch was answered enters the next
    one. The core's state (exact table, kept noise, use counts) lives in Beam state through its
    versioned ``to_bytes`` format, so a runner checkpoint restores it bit for bit.
    """

    def __init__(self, config: CoreConfig, with_metadata: bool) -> None:
        self._config, self._with_metadata = config, with_metadata

    def process(
        self,
        element: tuple[int, tuple[bytes, tuple[str, Any, Any]]],
        data=_DATA_PARAM,
        queries=_QUERY_PARAM,
        next_time=_NEXT_PARAM,
        last=_LAST_PARAM,
        salt=_SALT_PARAM,
        timer=_TIMER_PARAM,
    ) -> None:
        _, (run_salt, (tag, t, payload)) = element
        # The timer answers; it reads the run's salt from state, written before it is set.
        if salt.read() != run_salt:
            salt.write(run_salt)
        if tag == _DATA:
            data.add((t, payload))
            return
        micros = _micros(t)
        answered = last.read()
        if answered is not None and micros <= answered[0]:
            # Answering it now would put it at a later time than it declares; answering it at
            # its time is impossible (batch times must increase). Fail loudly, drop nothing.
            raise ValueError(
                f"query batch at time {t!r} arrived after the batch at time {answered[1]!r} was "
                "answered: query times must reach the transform before the watermark passes them"
            )
        queries.add((micros, t, payload))
        pending = next_time.read()
        if pending is None or micros < pending:
            timer.set(Timestamp(micros=micros))
            next_time.write(micros)

    @on_timer(_ANSWER_TIMER)
    def answer(
        self,
        fired=beam.DoFn.TimestampParam,
        sketch=_SKETCH_PARAM,
        data=_DATA_PARAM,
        queries=_QUERY_PARAM,
        next_time=_NEXT_PARAM,
        last=_LAST_PARAM,
        salt=_SALT_PARAM,
        timer=_TIMER_PARAM,
    ) -> Iterator[Any]:
        now = next_time.read()
        now = int(fired.micros) if now is None else now
        pending = list(queries.read())
        due = sorted((q for q in pending if q[0] <= now), key=lambda q: q[0])
        rest = [q for q in pending if q[0] > now]
        if not due:
            return
        config = self._config
        core = config.restore(sketch.read(), config.noise_source.for_run(salt.read()))
        buffered = list(data.read())
        if buffered:
            times = np.concatenate([b[0] for b in buffered])
            h1 = np.concatenate([b[1][0] for b in buffered])
            h2 = np.concatenate([b[1][1] for b in buffered])
        else:
            times = np.zeros(0, np.int64)
            h1 = h2 = np.zeros(0, np.uint64)
        added = np.zeros(times.size, dtype=np.bool_)
        i = 0
        while i < len(due):
            micros, t = due[i][0], due[i][1]
            keys: list[Any] = []
            while i < len(due) and due[i][0] == micros:  # equal times form one batch
                keys.extend(due[i][2])
                i += 1
            delta = (times <= micros) & ~added
            if delta.any():
                core.update_hashes(h1[delta], h2[delta])
                added |= delta
            answer = core.answer(keys, time=t)
            yield from answer_records(answer, keys, t, self._with_metadata, self._config)
        sketch.write(core.to_bytes())
        last.write((due[-1][0], due[-1][1]))
        data.clear()
        keep = ~added
        if keep.any():
            data.add((times[keep], (h1[keep], h2[keep])))
        queries.clear()
        for q in rest:
            queries.add(q)
        if rest:
            upcoming = min(q[0] for q in rest)
            timer.set(Timestamp(micros=upcoming))
            next_time.write(upcoming)
        else:
            next_time.clear()


def expand_event_time(
    pcoll: beam.PCollection,
    queries: beam.PCollection,
    config: CoreConfig,
    key_fn: Any,
    with_metadata: bool,
    run_salt: beam.pvalue.AsSingleton,
) -> Any:
    """Answer each batch of the query PCollection ``queries`` from the data ``pcoll`` at its
    event time, with the core of ``config`` in one stateful single-key step.
    """
    data = pcoll | "HashData" >> beam.ParDo(_StampData(config.seed, key_fn))
    parsed = (
        queries
        | "GlobalQueries" >> beam.WindowInto(GlobalWindows())
        | "ParseQueries" >> beam.ParDo(_ParseQuery())
    )
    both = (data, parsed) | "Flatten" >> beam.Flatten()
    return with_run_salt(both, run_salt) | "AnswerAtEventTime" >> beam.ParDo(
        _AnswerAtEventTime(config, with_metadata)
    ).with_input_types(tuple[int, Any]).with_output_types(Any)
