"""The sharded Misra-Gries sketch's bytes: round trip and seeded fuzz of its decoder.

``ShardedMisraGries.from_bytes`` must give back an equal sketch, and on mutated bytes raise
``SketchFormatError`` (never another exception, never a large allocation), with the harness of
``tests/test_fuzz_decoders.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_fuzz_decoders import EXAMPLES, fuzz_decoder

from beam_dpsketch.serialization import SketchFormatError
from beam_dpsketch.sketches.misra_gries import MisraGries, ShardedMisraGries

KEYS = (np.arange(300) % 37).tolist()


def example() -> ShardedMisraGries:
    return ShardedMisraGries(4, 3).update(KEYS)


def test_round_trip_and_merge():
    sk = example()
    assert ShardedMisraGries.from_bytes(sk.to_bytes()) == sk
    holders = ShardedMisraGries(4, 2, "holder").update_shard(1, KEYS)
    back = ShardedMisraGries.from_bytes(holders.to_bytes())
    assert back.partition == "holder" and back.shard(1) == MisraGries(4).update(KEYS)
    assert back.shard(0).is_empty()
    # Two halves of the shards merge into the whole; a shard in both is merged (then refused by
    # PMG, which needs one sequential sketch).
    a, b = ShardedMisraGries(4, 3), ShardedMisraGries(4, 3)
    for j in range(3):
        (a if j < 2 else b).add_shard(j, sk.shard(j))
    assert a.merge(b) == sk
    assert a.merge(example()).shard(0).merged
    with pytest.raises(ValueError, match="other"):
        a.merge(ShardedMisraGries(4, 2))


def test_malformed_bytes_raise_a_format_error():
    with pytest.raises(SketchFormatError):
        ShardedMisraGries.from_bytes(example().to_bytes()[:-3])


def test_decoder_survives_mutations():
    EXAMPLES["ShardedMisraGries"] = (example, ShardedMisraGries.from_bytes)
    try:
        failures = fuzz_decoder("ShardedMisraGries", 1500, 20261129)
    finally:
        del EXAMPLES["ShardedMisraGries"]
    assert not failures, "; ".join(failures)
