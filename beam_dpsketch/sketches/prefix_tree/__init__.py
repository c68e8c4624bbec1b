"""Heavy hitters without a candidate list: a tree of DP linear sketches over key prefixes.

:class:`PrefixTreeSketch` is exact and mergeable (one Count Sketch or Count-Min sketch per
prefix length of the keys' canonical bytes); :class:`PrivatePrefixTree` releases it once with
noise for the whole tree ([ZQR+22, Algorithm 3] per level, the budget split over the levels as
in [ZQR+22, Section 4.2]) and extracts the top keys by descending the noisy tree, which is
post-processing. The design is derived here (docs/algorithms.md#top-keys).
"""

from beam_dpsketch.sketches.prefix_tree.tree import (
    ALPHABET,
    MAX_KEY_BYTES,
    PrefixTreeSketch,
    PrivatePrefixTree,
    TopKey,
    encode_paths,
    level_seed,
    tree_level_budget,
)

__all__ = [
    "ALPHABET",
    "MAX_KEY_BYTES",
    "PrefixTreeSketch",
    "PrivatePrefixTree",
    "TopKey",
    "encode_paths",
    "level_seed",
    "tree_level_budget",
]
