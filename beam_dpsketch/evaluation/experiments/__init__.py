"""Experiment modules, one per paper; each builds its grid, runs it and writes its report.

Only :mod:`~beam_dpsketch.evaluation.experiments.sketches` (the non-private baselines) exists so
far; the papers' DP experiments land with their algorithms.
"""
