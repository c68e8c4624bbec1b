"""``DPQuantiles`` takes the shape of its tree as one value object, ``QuantileTree``."""

from __future__ import annotations

import inspect

import pytest

import beam_dpsketch as dps
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.transforms import DPQuantiles
from beam_dpsketch.transforms.quantiles import QuantileTree

PURE = PrivacyBudget.pure(1.0)


def test_the_tree_is_one_parameter():
    assert dps.QuantileTree is QuantileTree
    names = set(inspect.signature(DPQuantiles.__init__).parameters)
    assert "tree" in names
    assert not names & {"width", "depth", "seed", "branching", "exact_nodes", "leaf_bits"}
    assert "consistency" not in names


def test_the_default_tree_and_a_declared_one():
    default = DPQuantiles([0.5], 0, 255, PURE).mechanism
    assert default.layout == (0, 255, 1024, 5, 0)
    assert default.tree == {"branching": 32, "exact_nodes": 1 << 15, "leaf_bits": 0}
    assert default.consistency is True
    shape = QuantileTree(branching=2, exact_nodes=64, leaf_bits=2, consistency=False, width=32)
    declared = DPQuantiles([0.5], 0, 255, PURE, tree=shape).mechanism
    assert declared.layout == (0, 255, 32, 5, 0)
    assert declared.tree == {"branching": 2, "exact_nodes": 64, "leaf_bits": 2}
    assert declared.consistency is False


def test_a_bad_tree_is_refused_naming_the_field():
    with pytest.raises(TypeError, match="consistency must be a bool"):
        QuantileTree(consistency=1)
    with pytest.raises(TypeError, match="tree must be a QuantileTree"):
        DPQuantiles([0.5], 0, 255, PURE, tree={"width": 32})
    with pytest.raises(ValueError, match="branching"):
        DPQuantiles([0.5], 0, 255, PURE, tree=QuantileTree(branching=3))
