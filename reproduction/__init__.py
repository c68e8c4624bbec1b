"""The paper-reproduction harness: the papers' experiments, each claim reported with a verdict.

A top-level folder of the source repository, not part of the installed ``beam_dpsketch``
package: run it from a checkout (``beam-dpsketch evaluate PAPER`` from the repository's root).
Modules (imported on demand, so ``beam-dpsketch --help`` stays light):

* :mod:`~reproduction.papers`: the papers, each an experiment table
  (:class:`~reproduction.papers.Paper`), and :func:`~reproduction.papers.run_paper`, which
  runs any of them.
* :mod:`~reproduction.datasets`: seeded Zipf / Gaussian generators matching the
  papers' set-ups, real-data loaders (US flights 2001, English word frequencies) fetched from
  the package registries into a checksummed cache, and exact ground truth.
* :mod:`~reproduction.metrics`: ARE, AAE, MAE, MRE, precision / recall / F1, rank
  error and throughput, each as defined in the paper whose results it reproduces.
* :mod:`~reproduction.runner`: declared experiment grids, results in a tidy
  Parquet/CSV table, cached and resumable, optionally on 2 worker processes.
* :mod:`~reproduction.report`: claims with verdicts, matplotlib figures, HTML.
* :mod:`~reproduction.experiments`: one module (or package) per paper.
* :mod:`~reproduction.cli`: the ``beam-dpsketch evaluate PAPER`` subcommand.

See ``docs/evaluation.md``.
"""
