"""Exact, mergeable sketches in pure numpy (no Beam import). Privacy is added at release."""

from beam_dpsketch.sketches.countmin import CountMinSketch
from beam_dpsketch.sketches.countsketch import CountSketch
from beam_dpsketch.sketches.misragries import MisraGries

__all__ = ["CountMinSketch", "CountSketch", "MisraGries"]
