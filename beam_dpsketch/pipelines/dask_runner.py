"""Beam's DaskRunner with the corrections a batch DP pipeline needs to scale out on Dask.

Beam 2.77's ``DaskRunner`` (``apache_beam.runners.dask.dask_runner``) translates a pipeline to
``dask.bag`` operations. Five of its translations keep a pipeline on one Dask worker, repeat
work, or lose or repeat data, and :class:`ScalingDaskRunner` corrects them; everything else is
Beam's runner:

``finish_bundle`` outputs
    Beam's ``ParDo`` translation collects a bundle's outputs *before* it calls the ``DoFn``'s
    ``finish_bundle``, so whatever ``finish_bundle`` emits is dropped silently: the batches a
    per-element batching step emits at the end of a bundle, the partial accumulators of a lifted
    combine, the files ``WriteToText`` reports. Here they are collected after it.
Combines
    Without combiner lifting, a ``CombinePerKey`` (and so ``CombineGlobally``, and every DP
    transform's exact sketch) is a ``GroupByKey`` of the raw input followed by one combine: the
    whole input crosses the shuffle to the worker that holds the key, and that worker alone
    builds the sketch. Here a ``CombinePerKey`` in the global window is lifted as on Beam's
    other runners (``LiftedCombinePerKey``): each partition builds its own accumulator, and only
    accumulators cross the shuffle to be merged. They are grouped in one partition: Beam's
    ``GroupByKey`` translation would shuffle them all-to-all, ``n * n`` small tasks for ``n``
    partitions, whose scheduling cost more than the accumulators. Misra-Gries releases that
    post-process one segment per accumulator (Design B, select-then-count) then depend on the
    partitioning as they depend on the bundling on any runner.
``Reshuffle``
    Beam's translation makes ``Reshuffle`` a no-op, so a read that expands a file pattern from
    one element (``MatchFiles``, and the readers of :mod:`beam_dpsketch.io`) does all its work in
    one partition, on one worker. Here a ``Reshuffle`` spreads its elements over
    ``--dask_npartitions`` partitions (default :data:`DEFAULT_RESHUFFLE_PARTITIONS`).
Side inputs
    Beam's translation reads a side input inside each task that uses it, by computing the side
    input's whole graph again there: a step over 16 partitions with a side input computes that
    side input 16 times (select-then-count's count pass recomputed its selection pass per
    partition). Here each side input is one ``dask.delayed`` value, a dependency that Dask
    computes once and hands to every task of the step. It is built on the side input's own
    tasks (:func:`side_input_contents`), so a step that feeds both a side input and another
    consumer runs once: select-then-count reads its input once for its two passes and runs its
    selection pass once.
One ``DoFn`` per partition
    Beam's translation makes one ``DoFn`` and one list of received outputs per step, shared by
    every task that does not deserialise its arguments: on an in-process worker
    (``distributed.LocalCluster(processes=False)``, ``Client(processes=False)``) each partition
    returns the outputs of every partition before it (a lifted ``Count`` of 1,000 elements
    over 16 partitions counts 909,024), and partitions running at once on a worker's threads
    share the state a ``DoFn`` keeps on ``self``. Here each partition unpickles its own copy of the
    step and makes its own receivers; a worker process, which deserialises every task's
    arguments anyway, does no more work than before.

What the DaskRunner does not implement stays refused by the DP transforms (windows, triggers,
timestamps, state and timers; :mod:`beam_dpsketch.transforms.engines` finds the runner's limits
through its base class). Beam's ``DaskRunner`` itself is refused by every DP transform, since it
drops ``finish_bundle`` outputs; this runner declares that it keeps them
(``keeps_finish_bundle_outputs``). Use it as ``--runner=beam_dpsketch.pipelines.dask_runner.ScalingDaskRunner``
(the command line's ``--runner dask``) with the DaskRunner's own options
(``--dask_client_address``, ...).
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import pickle
import typing as t

import apache_beam as beam
import cloudpickle
import dask.bag as db
from apache_beam import DoFn, pvalue
from apache_beam.pipeline import AppliedPTransform, PipelineVisitor, PTransformOverride
from apache_beam.runners.common import DoFnContext, DoFnInvoker, DoFnSignature
from apache_beam.runners.dask import transform_evaluator as beam_dask
from apache_beam.runners.dask.dask_runner import DaskRunner
from apache_beam.runners.dask.overrides import _Reshuffle
from apache_beam.transforms.combiners import LiftedCombinePerKey
from apache_beam.transforms.sideinputs import SideInputMap
from dask import delayed
from dask.delayed import Delayed

__all__ = [
    "DEFAULT_RESHUFFLE_PARTITIONS",
    "LiftCombines",
    "ScalingDaskRunner",
    "side_input_contents",
]

#: Partitions a ``Reshuffle`` spreads its elements over when ``--dask_npartitions`` is not given.
DEFAULT_RESHUFFLE_PARTITIONS = 16


@dataclasses.dataclass
class _WindowedValues:
    """The iterable a ``SideInputMap`` reads: computed values, in their windows."""

    values: list[t.Any]
    window_fn: t.Any

    def __iter__(self) -> t.Iterator[t.Any]:
        for value in self.values:
            yield beam_dask.get_windowed_value(value, self.window_fn)


def _apply_dofn_to_bundle(
    items: t.Iterable[t.Any],
    pickled_step: bytes,
    side_specs: list[tuple[t.Any, t.Any, t.Any]],
    *side_values: list[t.Any],
) -> list[t.Any]:
    """Run a ``DoFn`` over one partition; its outputs include those of ``finish_bundle``.

    Each partition runs its own copy of the ``DoFn`` (``pickled_step``, a :class:`_DoFnStep`
    pickled once when the graph is built) with its own receivers and output handler. Beam's
    translation makes these once per step: a worker that runs tasks without deserialising their
    arguments (an in-process worker, ``LocalCluster(processes=False)``) then shares one receiver
    list between partitions, so that each partition returns the outputs of every partition
    before it, and its threads share one ``DoFn`` whose batches and accumulators live on
    ``self``. A worker process deserialises each task's arguments anyway, so the copy costs it
    nothing more.
    ``side_values`` are the side inputs' contents, computed once by Dask as dependencies of the
    task (Beam's translation recomputes a side input's whole graph inside every task reading it).
    """
    step: _DoFnStep = pickle.loads(pickled_step)  # noqa: S301 - our own graph's bytes
    side_inputs = None
    if side_specs:
        side_inputs = [
            SideInputMap(view_type, view_options, _WindowedValues(list(values), window_fn))
            for (view_type, view_options, window_fn), values in zip(
                side_specs, side_values, strict=True
            )
        ]
    receivers = beam_dask.OneReceiver()
    invoker = DoFnInvoker.create_invoker(
        DoFnSignature(step.fn),
        beam_dask._OutputHandler(  # noqa: SLF001 - the handler Beam's translation uses
            window_fn=step.window_fn,
            main_receivers=receivers[None],
            tagged_receivers=receivers,
            per_element_output_counter=None,
            output_batch_converter=None,
            process_yields_batches=False,
            process_batch_yields_elements=False,
        ),
        context=DoFnContext(step.label, state=None),
        side_inputs=side_inputs,
        input_args=list(step.args),
        input_kwargs=dict(step.kwargs),
        user_state_context=None,
        bundle_finalizer_param=DoFn.BundleFinalizerParam(),
    )
    invoker.invoke_setup()
    invoker.invoke_start_bundle()
    for item in items:
        invoker.invoke_process(beam_dask.get_windowed_value(item, step.window_fn))
    invoker.invoke_finish_bundle()
    invoker.invoke_teardown()
    return [v.value for v in receivers.values]


def _concatenate(*partitions: list[t.Any]) -> list[t.Any]:
    """One list of the elements of ``partitions``, in partition order."""
    return list(itertools.chain.from_iterable(partitions))


def side_input_contents(bag: db.Bag | None) -> Delayed:
    """The elements of ``bag`` as one ``dask.delayed`` list, sharing ``bag``'s tasks.

    ``delayed(list)(bag)`` would optimise ``bag``'s graph on its own, renaming its fused tasks,
    so that the side input and every other consumer of the same steps would each compute them:
    select-then-count would run its selection pass (its read, its sketches and its merge) once
    for the count pass's side input and once more for the selection's markers, and read the
    input it shares with the count pass three times. Built from the bag's unoptimised
    partitions, the side input keeps the bag's task names, and the graph computes each step
    once whatever reads it.
    """
    if bag is None:
        return delayed(list)(())
    return delayed(_concatenate)(*bag.to_delayed(optimize_graph=False))


@dataclasses.dataclass(frozen=True)
class _DoFnStep:
    """What a partition needs to run one ``ParDo``: the ``DoFn``, its label, its extra arguments
    and the main input's window function."""

    fn: DoFn
    label: str
    args: tuple[t.Any, ...]
    kwargs: dict[str, t.Any]
    window_fn: t.Any


class _ParDo(beam_dask.ParDo):
    """Beam's ``ParDo`` translation, keeping what ``finish_bundle`` emits and computing each side
    input once.

    ``side_inputs`` are ``(view type, view options, window mapping, bag)`` for each side input
    (from :meth:`ScalingDaskRunner.to_dask_bag_visitor`).
    """

    def apply(self, input_bag: db.Bag, side_inputs: t.Any = None) -> db.Bag:
        transform = t.cast(beam.ParDo, self.transform)
        args, kwargs = transform.raw_side_inputs
        main_input = next(iter(self.applied.main_inputs.values()))
        window_fn = getattr(getattr(main_input, "windowing", None), "windowfn", None)
        step = _DoFnStep(transform.fn, transform.label, tuple(args), dict(kwargs), window_fn)
        pickled_step = cloudpickle.dumps(step)
        specs = [(view, options, mapping) for view, options, mapping, _ in side_inputs or ()]
        # Each side input's contents as one dask.delayed value: a dependency every task of this
        # step receives computed, instead of computing it again inside each task.
        contents = [side_input_contents(bag) for _, _, _, bag in side_inputs or ()]
        return input_bag.map_partitions(_apply_dofn_to_bundle, pickled_step, specs, *contents)


class _Reshuffled(beam_dask.DaskBagOp):
    """``Reshuffle``: the elements spread over several partitions (Beam's translation keeps
    them where they are)."""

    def apply(self, input_bag: db.Bag, side_inputs: beam_dask.OpSide = None) -> db.Bag:
        partitions = self.bag_kwargs.get("npartitions") or DEFAULT_RESHUFFLE_PARTITIONS
        return input_bag.repartition(npartitions=partitions)


class _GroupLiftedAccumulators(beam_dask.GroupByKey):
    """The ``GroupByKey`` inside a lifted combine: its input holds one accumulator per partition
    and key, grouped in one partition.

    Beam's translation groups with a task-based shuffle into as many partitions as it receives:
    ``n * n`` small tasks for ``n`` partitions (256 for 16), which cost far more scheduling than
    the accumulators cost to move. A global combine has one key, so its other output partitions
    would be empty; the per-key merges of a ``CombinePerKey`` run in one task.
    """

    def apply(self, input_bag: db.Bag, side_inputs: beam_dask.OpSide = None) -> db.Bag:
        return super().apply(input_bag.repartition(npartitions=1), side_inputs)


def _groups_lifted_accumulators(node: AppliedPTransform) -> bool:
    """Whether ``node`` is the grouping step of a :class:`LiftedCombinePerKey` (the DaskRunner's
    ``GroupByKey`` expands to a ``_GroupByKeyOnly`` inside it)."""
    group = node.parent
    combine = group.parent if group is not None else None
    return combine is not None and isinstance(combine.transform, LiftedCombinePerKey)


_TRANSLATIONS = {**beam_dask.TRANSLATIONS, beam.ParDo: _ParDo, _Reshuffle: _Reshuffled}


class LiftCombines(PTransformOverride):
    """A ``CombinePerKey`` in the global window becomes a lifted combine."""

    def matches(self, applied_ptransform: AppliedPTransform) -> bool:
        transform = applied_ptransform.transform
        return isinstance(transform, beam.CombinePerKey) and (
            applied_ptransform.inputs[0].windowing.is_default()
        )

    def get_replacement_transform_for_applied_ptransform(
        self, applied_ptransform: AppliedPTransform
    ) -> beam.PTransform:
        transform = applied_ptransform.transform
        try:
            return LiftedCombinePerKey(transform.fn, transform.args, transform.kwargs)
        except NotImplementedError:
            return transform


class ScalingDaskRunner(DaskRunner):
    """Beam's ``DaskRunner`` with ``finish_bundle`` outputs kept, combines lifted, ``Reshuffle``
    spreading its elements, side inputs computed once and one ``DoFn`` per partition (see the
    module docstring). Batch, global window only, like the ``DaskRunner``."""

    #: Declares to :func:`beam_dpsketch.transforms.engines.runner_limits` that this runner's
    #: ``ParDo`` translation keeps what ``finish_bundle`` emits, so the DP transforms, which
    #: refuse Beam's ``DaskRunner`` for dropping it, accept this subclass.
    keeps_finish_bundle_outputs = True

    @staticmethod
    def to_dask_bag_visitor(bag_kwargs: dict | None = None) -> PipelineVisitor:
        """Beam's visitor (``DaskRunner.to_dask_bag_visitor``) over this module's translations."""
        bag_kwargs = bag_kwargs or {}

        @dataclasses.dataclass
        class DaskBagVisitor(PipelineVisitor):
            bags: dict[AppliedPTransform, db.Bag] = dataclasses.field(
                default_factory=collections.OrderedDict
            )

            def visit_transform(self, transform_node: AppliedPTransform) -> None:
                op_class = _TRANSLATIONS.get(transform_node.transform.__class__, beam_dask.NoOp)
                if op_class is beam_dask.GroupByKey and _groups_lifted_accumulators(transform_node):
                    op_class = _GroupLiftedAccumulators
                op = op_class(transform_node, bag_kwargs=bag_kwargs)
                op_kws: dict[str, t.Any] = {"input_bag": None, "side_inputs": None}
                inputs = list(transform_node.inputs)
                if inputs:
                    bag_inputs: list[t.Any] = []
                    for input_value in inputs:
                        if isinstance(input_value, pvalue.PBegin):
                            bag_inputs.append(None)
                        prev_op = input_value.producer
                        if prev_op in self.bags:
                            bag_inputs.append(self.bags[prev_op])
                    if len(bag_inputs) == 1 and not isinstance(op, beam_dask.Flatten):
                        op_kws["input_bag"] = bag_inputs[0]
                    else:
                        op_kws["input_bag"] = bag_inputs
                side_inputs = list(transform_node.side_inputs)
                if side_inputs:
                    op_kws["side_inputs"] = [
                        (
                            type(si),
                            si._view_options(),  # noqa: SLF001 - as Beam's visitor does
                            si._window_mapping_fn,  # noqa: SLF001
                            self.bags.get(si.pvalue.producer),
                        )
                        for si in side_inputs
                    ]
                self.bags[transform_node] = op.apply(**op_kws)

        return DaskBagVisitor()

    def run_pipeline(self, pipeline: beam.Pipeline, options: t.Any) -> t.Any:
        pipeline.replace_all([LiftCombines()])
        return super().run_pipeline(pipeline, options)
