"""Every windowing rule in one place, and refusals that name a configuration that is accepted.

The newcomer task "fixed windows with an early trigger", done from the docs only: write the
windowing the docs show, and when a transform refuses it, do exactly what the refusal says
(``Accepted instead: ...``). The next try must be accepted, for every transform that supports
windows. No pipeline needs to run for that (every refusal happens when the transform is
applied); one accepted configuration is run end to end on the FnApiRunner.
"""

from __future__ import annotations

import ast
import pathlib
import re
from collections.abc import Callable
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that
from apache_beam.transforms import trigger as tr
from apache_beam.transforms import window as bw

import beam_dpsketch
import beam_dpsketch.privacy
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.transforms import (
    ContinualDPSketch,
    DPAggregate,
    DPCount,
    DPFrequencies,
    DPHeavyHitters,
    DPHistogram,
    DPIntermittentQueries,
    DPQuantiles,
    DPSlidingWindowFrequencies,
    QuerySchedule,
    WindowingRefused,
)
from beam_dpsketch.transforms.count import CountLaplaceMechanism
from beam_dpsketch.transforms.engines import UnsupportedRunnerError
from beam_dpsketch.transforms.quantiles import QuantileTree
from beam_dpsketch.transforms.sliding import SlidingLayout
from beam_dpsketch.transforms.windowing_rules import (
    WindowingDeclaration,
    WindowingRequirement,
    accept_windowing,
)

APPROX = PrivacyBudget.approx(1.0, 1e-6)
PURE = PrivacyBudget.pure(1.0)

# What the code in a refusal may name: Beam's windows and triggers, as the docs import them.
CODE_NAMES: dict[str, Any] = {
    name: getattr(module, name)
    for module, names in (
        (tr, ("AfterWatermark", "AfterCount", "AfterProcessingTime", "Repeatedly", "AfterAny")),
        (tr, ("AfterAll", "AfterEach", "DefaultTrigger", "AccumulationMode")),
        (bw, ("GlobalWindows", "FixedWindows", "SlidingWindows", "Sessions")),
        (beam_dpsketch.privacy, ("PrivacyUnit", "Windowing")),
    )
    for name in names
}
WINDOW_INTO = ("windowfn", "trigger", "accumulation_mode", "allowed_lateness")


def _top_level_split(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside brackets and quotes."""
    parts, depth, quote, start, i = [], 0, None, 0, 0
    while i < len(text):
        ch = text[i]
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i])
            i += len(sep)
            start = i
            continue
        i += 1
    parts.append(text[start:])
    return parts


def accepted_configurations(message: str) -> list[dict[str, Any]]:
    """The configurations a refusal proposes, read from its message alone."""
    assert "Accepted instead: " in message, message
    proposals = message.split("Accepted instead: ", 1)[1]
    out = []
    for proposal in _top_level_split(proposals, " or "):
        settings = {}
        for item in _top_level_split(proposal, ", "):
            key, value = item.split("=", 1)
            settings[key.strip()] = eval(value, dict(CODE_NAMES))  # noqa: S307 - the message's code
        out.append(settings)
    return out


class Newcomer:
    """Builds the pipeline the docs show and follows each refusal's first proposal."""

    def __init__(
        self,
        make: Callable[..., beam.PTransform],
        windowing: dict[str, Any],
        runner: str = "FnApiRunner",
        options: dict[str, Any] | None = None,
    ) -> None:
        self.make = make
        self.windowing = dict(windowing)
        self.runner = runner
        self.options = dict(options or {})
        self.refusals: list[str] = []

    def attempt(self) -> beam.PTransform:
        # Streaming mode keeps every route to a runner judged as it would run.
        p = beam.Pipeline(runner=self.runner, options=PipelineOptions(["--streaming"]))
        w = dict(self.windowing)
        data = (
            p
            | beam.Create([bw.TimestampedValue(i % 5, i) for i in range(20)])
            | beam.WindowInto(w.pop("windowfn"), **w)
        )
        transform = self.make(**self.options)
        _ = data | transform
        return transform

    def solve(self, max_tries: int = 2) -> beam.PTransform:
        for _ in range(max_tries):
            try:
                return self.attempt()
            except WindowingRefused as exc:
                self.refusals.append(str(exc))
                first = accepted_configurations(str(exc))[0]
                for key, value in first.items():
                    if key in WINDOW_INTO:
                        self.windowing[key] = value
                    elif key == "runner":
                        self.runner = value
                    else:
                        self.options[key] = value
        raise AssertionError(f"not accepted after {max_tries} tries: {self.refusals}")


def _noise() -> NoiseSource:
    return NoiseSource.insecure_for_tests(7)


# Every transform that releases per window and pane, as the docs construct it.
WINDOWED: dict[str, Callable[..., beam.PTransform]] = {
    "DPAggregate": lambda **kw: DPAggregate(
        beam.combiners.CountCombineFn(), CountLaplaceMechanism(), budget=PURE, **kw
    ),
    "DPCount": lambda **kw: DPCount(PURE, **kw),
    "DPHistogram": lambda **kw: DPHistogram(8, APPROX, **kw),
    "DPHeavyHitters": lambda **kw: DPHeavyHitters(8, APPROX, **kw),
    "DPFrequencies": lambda **kw: DPFrequencies(32, 3, PURE, **kw),
    "DPQuantiles": lambda **kw: DPQuantiles(
        [0.5], 0, 15, PURE, tree=QuantileTree(width=32, depth=3), **kw
    ),
}

# "Fixed windows with an early trigger", as a newcomer writes it first.
FIRST_TRIES: dict[str, dict[str, Any]] = {
    "early every 10 s": {
        "windowfn": bw.FixedWindows(60),
        "trigger": tr.AfterWatermark(early=tr.AfterProcessingTime(10)),
        "accumulation_mode": tr.AccumulationMode.DISCARDING,
    },
    "early every 100 rows": {
        "windowfn": bw.FixedWindows(60),
        "trigger": tr.AfterWatermark(early=tr.AfterCount(100)),
        "accumulation_mode": tr.AccumulationMode.DISCARDING,
    },
    "early, accumulating, late data": {
        "windowfn": bw.FixedWindows(60),
        "trigger": tr.AfterWatermark(early=tr.AfterCount(100), late=tr.AfterCount(1)),
        "accumulation_mode": tr.AccumulationMode.ACCUMULATING,
        "allowed_lateness": 30,
    },
}


@pytest.mark.parametrize("first", list(FIRST_TRIES))
@pytest.mark.parametrize("name", list(WINDOWED))
def test_fixed_windows_with_an_early_trigger_in_at_most_two_tries(name, first):
    newcomer = Newcomer(WINDOWED[name], FIRST_TRIES[first])
    transform = newcomer.solve(max_tries=2)
    assert transform.charge is not None
    # It keeps what was asked for: fixed windows with early firings.
    assert isinstance(newcomer.windowing["windowfn"], bw.FixedWindows)
    assert newcomer.windowing["trigger"].early is not None
    # Each refusal names the transform by its label: the class name and its shape (here the
    # mechanism of that try).
    for refusal in newcomer.refusals:
        assert re.match(rf"{name}(\([^)]*\))?: ", refusal), refusal


@pytest.mark.parametrize("name", list(WINDOWED))
def test_on_a_runner_judged_as_prism_the_one_refusal_also_names_the_runner(name):
    # Beam's DirectRunner hands pipelines to Prism (no empty on-time pane after early firings):
    # the first refusal must fix the trigger and the runner at once. Nothing runs here.
    newcomer = Newcomer(WINDOWED[name], FIRST_TRIES["early every 10 s"], runner="DirectRunner")
    with pytest.raises(UnsupportedRunnerError):
        newcomer.attempt()
    newcomer.solve(max_tries=2)
    assert newcomer.runner == "FnApiRunner"
    assert len(newcomer.refusals) == 1
    assert "runner: " in newcomer.refusals[0] and "trigger" in newcomer.refusals[0]


def test_no_refusal_proposes_a_trigger_another_rule_refuses():
    # The batching rule once proposed a processing-time trigger, which the release step then
    # refused: a refusal's proposal is judged by every rule before it is made.
    batched = Newcomer(WINDOWED["DPQuantiles"], FIRST_TRIES["early every 100 rows"])
    batched.solve(max_tries=2)
    assert len(batched.refusals) == 1
    assert "AfterProcessingTime" not in batched.refusals[0].split("Accepted instead")[1]
    assert batched.windowing["trigger"] == tr.AfterWatermark(early=tr.AfterCount(1))


def test_the_default_mechanism_proposes_the_mechanism_that_keeps_the_trigger():
    newcomer = Newcomer(WINDOWED["DPHeavyHitters"], FIRST_TRIES["early every 10 s"])
    newcomer.solve(max_tries=2)
    (refusal,) = newcomer.refusals
    assert "defaults to mechanism 'select-then-count'" in refusal
    assert newcomer.options["mechanism"] == "design-b"
    assert newcomer.options["windowing"].max_panes_per_window >= 1


def test_an_accepted_proposal_runs():
    newcomer = Newcomer(WINDOWED["DPCount"], FIRST_TRIES["early every 10 s"])
    newcomer.solve(max_tries=2)
    w = dict(newcomer.windowing)
    p = beam.Pipeline(runner=newcomer.runner)
    counts = (
        p
        | beam.Create([bw.TimestampedValue(i % 5, i) for i in range(20)])
        | beam.WindowInto(w.pop("windowfn"), **w)
        | DPCount(PURE, noise_source=_noise(), **newcomer.options)
    )

    def some_release(released):
        assert len(released) >= 1

    assert_that(counts, some_release)
    p.run().wait_until_finish()


# Transforms that need the global window: their refusals too propose what they accept.
GLOBAL_ONLY: dict[str, Callable[..., beam.PTransform]] = {
    "DPSlidingWindowFrequencies": lambda **kw: DPSlidingWindowFrequencies(
        20,
        16,
        2,
        PrivacyBudget.zcdp(1.0),
        release_every=5,
        query_keys=[1],
        noise_source=_noise(),
        layout=SlidingLayout(block=10, alpha="1/2"),
        **kw,
    ),
    "DPIntermittentQueries": lambda **kw: DPIntermittentQueries(
        64,
        5,
        PURE,
        queries=QuerySchedule([(10, [1])]),
        clock="event_time",
        noise_source=_noise(),
        **kw,
    ),
}


@pytest.mark.parametrize("time_model", ["element", "pane"])
@pytest.mark.parametrize("first", ["sessions", "early every 100 rows"])
def test_continual_sketches_accept_what_they_propose(time_model, first):
    windowing = (
        {"windowfn": bw.Sessions(30)}
        if first == "sessions"
        else FIRST_TRIES["early every 100 rows"]
    )
    newcomer = Newcomer(
        lambda **kw: ContinualDPSketch(
            32,
            3,
            100,
            PrivacyBudget.approx(0.5, 1e-6),
            query_keys=[1],
            noise_source=_noise(),
            **{"time_model": time_model, **kw},
        ),
        windowing,
    )
    newcomer.solve(max_tries=2)
    assert len(newcomer.refusals) <= 1


@pytest.mark.parametrize("name", list(GLOBAL_ONLY))
def test_global_window_transforms_accept_what_they_propose(name):
    newcomer = Newcomer(GLOBAL_ONLY[name], FIRST_TRIES["early, accumulating, late data"])
    newcomer.solve(max_tries=2)
    assert len(newcomer.refusals) == 1
    assert isinstance(newcomer.windowing["windowfn"], bw.GlobalWindows)


def test_one_message_lists_every_rule_broken_each_naming_its_parameter():
    w = (
        beam.Pipeline(runner="FnApiRunner")
        | beam.Create([1])
        | beam.WindowInto(
            bw.SlidingWindows(60, 10),
            trigger=tr.AfterWatermark(early=tr.AfterProcessingTime(5)),
            accumulation_mode=tr.AccumulationMode.ACCUMULATING,
        )
    )
    requirement = WindowingRequirement(
        who="this mechanism", window_fns=("global", "fixed"), triggers="once", discarding=True
    )
    with pytest.raises(WindowingRefused) as e:
        accept_windowing(w.windowing, WindowingDeclaration(), name="t", requirement=requirement)
    assert e.value.parameters == ("windowfn", "trigger", "accumulation_mode", "trigger")
    reasons = str(e.value).split(". Accepted instead: ")[0].removeprefix("t: ")
    sentences = _top_level_split(reasons, ". ")
    assert [r.split(":")[0].split(" ")[0] for r in sentences] == list(e.value.parameters)
    (accepted,) = e.value.accepted[:1]
    assert accepted == {
        "windowfn": "FixedWindows(60)",
        "trigger": "AfterWatermark()",
        "accumulation_mode": "AccumulationMode.DISCARDING",
    }


def test_privacy_layer_imports_no_beam_anywhere():
    # Not at import time, and not inside functions either: privacy/ is pure logic.
    root = pathlib.Path(beam_dpsketch.__file__).parent / "privacy"
    offenders = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            if any(n.split(".")[0] == "apache_beam" for n in names):
                offenders.append(f"{path.name}:{node.lineno}")
        if re.search(
            r"__import__\(\s*['\"]apache_beam|import_module\(\s*['\"]apache_beam", path.read_text()
        ):
            offenders.append(path.name)
    assert offenders == []


def test_every_windowing_rule_lives_in_one_module():
    # No module but windowing_rules refuses a windowing, trigger or runner's pane behaviour:
    # every raise whose message speaks of them is there (or in the Beam-free planner it calls).
    root = pathlib.Path(beam_dpsketch.__file__).parent
    words = re.compile(
        r"trigger|WindowFn|global window|allowed.lateness|accumulation|early firing|"
        r"max_panes_per_window|max_windows_per_unit",
        re.IGNORECASE,
    )
    places = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Raise) or node.exc is None:
                continue
            texts = [
                c.value
                for c in ast.walk(node.exc)
                if isinstance(c, ast.Constant) and isinstance(c.value, str)
            ]
            if any(words.search(t) for t in texts):
                places.add(str(path.relative_to(root)))
    # The declaration's own type checks name their parameters too.
    assert places <= {"transforms/windowing_rules.py", "privacy/windowing.py"}, sorted(places)
