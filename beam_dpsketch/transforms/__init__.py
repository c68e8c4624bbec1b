"""Apache Beam transforms: differentially private releases, readers and exact sketches.

* Differentially private transforms, each stating its guarantee and neighbouring relation in
  its docstring: :class:`DPCount`, :class:`DPHistogram` and :class:`DPHeavyHitters` (DP
  Misra-Gries [LT23]), :class:`DPFrequencies` and :class:`DPQuantiles` (DP linear sketches
  [ZQR+22]), :class:`ContinualDPSketch` (Lazy and Punctual sketches under continual observation
  [Hol25]), :class:`DPSlidingWindowFrequencies` (DPSW-Sketch [WWC24]) and
  :class:`DPIntermittentQueries` (DP Count Sketch under intermittent queries [YKAE]), and
  :class:`DPTopKeys` (top keys with no candidate list, from a tree of DP linear sketches over
  key prefixes; derived here, ``docs/algorithms.md#top-keys``). The keys
  are those of ``docs/algorithms.md``, which lists the papers.
  Each charges its budget to a :class:`~beam_dpsketch.privacy.PrivacyAccountant` at pipeline
  construction, before anything runs.
* :class:`DPTransform`: the base every DP transform shares (budget, accountant, noise source,
  label, ``explain()``, ``display_data()``); :class:`DPAggregate` and :class:`ReleaseMechanism`:
  exact aggregation per window and pane, then one accounted noisy release, the extension point
  for a new DP aggregate.
* Release records (:mod:`~beam_dpsketch.transforms.records`, typed rows with a Beam schema):
  :class:`CountEstimate`, :class:`QuantileEstimate`, :class:`KeyEstimate`,
  :class:`BoundedKeyEstimate`, :class:`StepEstimate`, :class:`TimedEstimate`,
  :class:`TimedHeavyHitters`, :class:`IntermittentRecord`, :class:`ReleasedSketch` (a
  released sketch as a row, ``DPFrequencies(output="rows")``); :class:`WithWindowBounds` (the
  rows of a windowed release with their window bounds and pane); release objects
  with metadata: :class:`Release`, :class:`ContinualRelease`, :class:`SlidingWindowRelease`;
  and :func:`explain_pipeline`.
* Windowing: :func:`plan_releases` (the release plan of a PCollection's windowing) and
  :class:`WindowingRefused`, raised with a configuration that is accepted when a transform
  refuses a windowing, trigger or runner (every rule is in
  :mod:`~beam_dpsketch.transforms.windowing_rules`).
* Inputs: the readers of :mod:`beam_dpsketch.io` (:class:`ReadKeyBatches`,
  :class:`ReadKeyPairs`, :class:`ReadOrderedKeys`),
  :class:`BoundContributions` (per-privacy-unit contribution bounding) and :class:`BatchKeys`.
* Exact, non-private sketches of a PCollection: :class:`SketchGlobally`, :class:`SketchPerKey`
  with a :class:`SketchSpec`. Their output is not differentially private.

Coders, CombineFns, release mechanisms of the individual transforms and other building blocks
stay importable from their modules (e.g. :mod:`beam_dpsketch.transforms.combiners`).
"""

from beam_dpsketch.io import ReadKeyBatches, ReadKeyPairs, ReadOrderedKeys
from beam_dpsketch.transforms.base import DPTransform
from beam_dpsketch.transforms.batching import BatchKeys, BatchKeysPerGroup, KeyBatch
from beam_dpsketch.transforms.bounding import BoundContributions
from beam_dpsketch.transforms.combiners import SketchSpec
from beam_dpsketch.transforms.continual import ContinualDPSketch, ContinualRelease
from beam_dpsketch.transforms.count import DPCount
from beam_dpsketch.transforms.frequencies import DPFrequencies
from beam_dpsketch.transforms.heavy_hitters import DPHeavyHitters, DPHistogram
from beam_dpsketch.transforms.intermittent import DPIntermittentQueries, QuerySchedule
from beam_dpsketch.transforms.quantiles import DPQuantiles
from beam_dpsketch.transforms.records import (
    BoundedKeyEstimate,
    CountEstimate,
    IntermittentRecord,
    KeyEstimate,
    QuantileEstimate,
    ReleasedSketch,
    StepEstimate,
    TimedEstimate,
    TimedHeavyHitters,
    WithWindowBounds,
)
from beam_dpsketch.transforms.release import (
    DPAggregate,
    Release,
    ReleaseMechanism,
    explain_pipeline,
)
from beam_dpsketch.transforms.sketch import SketchGlobally, SketchPerKey
from beam_dpsketch.transforms.sliding import DPSlidingWindowFrequencies, SlidingWindowRelease
from beam_dpsketch.transforms.top_keys import DPTopKeys
from beam_dpsketch.transforms.windowing_rules import WindowingRefused, plan_releases

__all__ = [
    "BatchKeys",
    "BatchKeysPerGroup",
    "BoundContributions",
    "BoundedKeyEstimate",
    "ContinualDPSketch",
    "ContinualRelease",
    "CountEstimate",
    "DPAggregate",
    "DPCount",
    "DPFrequencies",
    "DPHeavyHitters",
    "DPHistogram",
    "DPIntermittentQueries",
    "DPQuantiles",
    "DPSlidingWindowFrequencies",
    "DPTopKeys",
    "DPTransform",
    "IntermittentRecord",
    "KeyBatch",
    "KeyEstimate",
    "QuantileEstimate",
    "QuerySchedule",
    "ReadKeyBatches",
    "ReadKeyPairs",
    "ReadOrderedKeys",
    "Release",
    "ReleaseMechanism",
    "ReleasedSketch",
    "SketchGlobally",
    "SketchPerKey",
    "SketchSpec",
    "SlidingWindowRelease",
    "StepEstimate",
    "TimedEstimate",
    "TimedHeavyHitters",
    "WindowingRefused",
    "WithWindowBounds",
    "explain_pipeline",
    "plan_releases",
]
