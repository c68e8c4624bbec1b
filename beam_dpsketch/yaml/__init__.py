"""The DP transforms in Beam YAML pipelines: a provider of plain-config transforms.

Beam YAML (``python -m apache_beam.yaml.main --yaml_pipeline_file=...``, with the ``yaml``
extra installed: ``pip install "beam-dpsketch[yaml]"``) builds a pipeline from a YAML file whose
``providers:`` list says where transforms it does not know come from. This package is such a
provider for the transforms of :mod:`beam_dpsketch.transforms`, in the Python environment of
the pipeline. Register every transform at once by including the bundled list
(its path is :data:`PROVIDERS_FILE`)::

    providers:
      - include: /path/to/beam_dpsketch/yaml/providers.yaml

or name the transforms you use::

    providers:
      - type: python
        config: {}
        transforms:
          DPHeavyHitters: beam_dpsketch.yaml.YamlDPHeavyHitters

Then a step ``type: DPHeavyHitters`` with a ``config:`` mapping releases DP heavy hitters of
schema'd rows as schema'd rows, which Beam YAML's writers (``WriteToParquet``,
``WriteToJson``, ...) take as they are. The transforms (:mod:`beam_dpsketch.yaml.transforms`):
``DPHeavyHitters``, ``DPHistogram``, ``DPFrequencies``, ``DPQuantiles`` and ``DPCount``; the
repeated releases of :mod:`beam_dpsketch.yaml.streaming`: ``ContinualDPSketch``,
``DPSlidingWindowFrequencies`` and ``DPIntermittentQueries``; ``DPTopKeys``
(:mod:`beam_dpsketch.yaml.top_keys`), the top keys with no candidate list; and the source
``ReadNewLines``
(:mod:`beam_dpsketch.yaml.sources`), which reads the lines of files as they appear in a
directory. Each transform's guarantee is that of the library transform it
builds; the configuration (budgets, field names, public keys) is public, as the pipeline file
is. ``docs/guide/yaml.md`` lists every key.
"""

from pathlib import Path

from beam_dpsketch.yaml.sources import ReadNewLines
from beam_dpsketch.yaml.streaming import (
    YamlContinualDPSketch,
    YamlDPIntermittentQueries,
    YamlDPSlidingWindowFrequencies,
)
from beam_dpsketch.yaml.top_keys import YamlDPTopKeys
from beam_dpsketch.yaml.transforms import (
    YamlDPCount,
    YamlDPFrequencies,
    YamlDPHeavyHitters,
    YamlDPHistogram,
    YamlDPQuantiles,
    YamlDPTransform,
    YamlTestNoiseOptions,
)

#: The provider list to ``include:`` from a pipeline's ``providers:``.
PROVIDERS_FILE: Path = Path(__file__).resolve().parent / "providers.yaml"

__all__ = [
    "PROVIDERS_FILE",
    "ReadNewLines",
    "YamlContinualDPSketch",
    "YamlDPCount",
    "YamlDPFrequencies",
    "YamlDPHeavyHitters",
    "YamlDPHistogram",
    "YamlDPIntermittentQueries",
    "YamlDPQuantiles",
    "YamlDPSlidingWindowFrequencies",
    "YamlDPTopKeys",
    "YamlDPTransform",
    "YamlTestNoiseOptions",
]
