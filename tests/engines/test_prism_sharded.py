"""Design D and the untrusted sum in batch on Prism, against the FnApiRunner under the same noise.

Both keep one sequential sketch per shard in keyed state, so their release does not depend on
Beam's bundling: the two runners must release the same rows (see ``test_prism_batch.py`` for the
harness).
"""

from __future__ import annotations

import apache_beam as beam
from matrix import assert_equal_and_nonempty, on_both, zipf_keys

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.transforms import DPHeavyHitters
from beam_dpsketch.transforms.heavy_hitters import DesignD, UntrustedShards

APPROX = PrivacyBudget.approx(1.0, 1e-6)


def test_sharded_mechanisms_equal_fnapi(tmp_path, prism_args):
    keys = zipf_keys(6000, 3, items=300, s=1.3)
    pairs = [(f"site-{i % 4}", int(x)) for i, x in enumerate(keys.tolist())]

    def build(p):
        d = DPHeavyHitters(
            30,
            APPROX,
            top=10,
            mechanism=DesignD(30, shards=4),
            noise_source=NoiseSource.insecure_for_tests(6),
            label="hh-d",
        )
        u = DPHeavyHitters(
            30,
            APPROX,
            top=10,
            mechanism=UntrustedShards(30, shards=3),
            noise_source=NoiseSource.insecure_for_tests(7),
            label="hh-u",
        )
        released_d = p | "Keys" >> beam.Create(keys.tolist()) | "D" >> d
        released_u = p | "Pairs" >> beam.Create(pairs) | "U" >> u
        return (
            released_d | "TagD" >> beam.Map(lambda r: ("d", r[0], r[1])),
            released_u | "TagU" >> beam.Map(lambda r: ("u", r[0], r[1])),
        ) | beam.Flatten()

    ref, got = on_both(build, tmp_path, prism_args)
    assert_equal_and_nonempty(ref, got)
    assert {tag for tag, *_ in got} == {"d", "u"}
