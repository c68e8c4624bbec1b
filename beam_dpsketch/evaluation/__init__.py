"""Evaluation harness: reproduce the papers' experiments and report each claim with a verdict.

Modules (imported on demand, so ``import beam_dpsketch`` stays light):

* :mod:`~beam_dpsketch.evaluation.datasets`: seeded Zipf / Gaussian generators matching the
  papers' set-ups, real-data loaders (US flights 2001, English word frequencies) fetched from
  the package registries into a checksummed cache, and exact ground truth.
* :mod:`~beam_dpsketch.evaluation.metrics`: ARE, AAE, MAE, MRE, precision / recall / F1, rank
  error and throughput, each as defined in the paper whose results it reproduces.
* :mod:`~beam_dpsketch.evaluation.runner`: declared experiment grids, results in a tidy
  Parquet/CSV table, cached and resumable, optionally on 2 worker processes.
* :mod:`~beam_dpsketch.evaluation.report`: claims with verdicts, matplotlib figures, HTML.
* :mod:`~beam_dpsketch.evaluation.experiments`: one module per paper.
* :mod:`~beam_dpsketch.evaluation.cli`: the ``beam-dpsketch evaluate PAPER`` subcommand.

See ``docs/evaluation.md``.
"""
