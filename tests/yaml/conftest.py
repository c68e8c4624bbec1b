"""Fixtures of the Beam YAML tests: the Prism runner of ``tests/engines`` (built once, cached)."""

from tests.engines.conftest import prism_args, prism_binary

__all__ = ["prism_args", "prism_binary"]
