"""The ``beam-dpsketch`` command line: one module per subcommand, each one Beam pipeline.

:mod:`~beam_dpsketch.pipelines.cli` is the entry point (``beam-dpsketch``); every other module
adds one subcommand (``heavy-hitters``, ``frequencies``, ``quantiles``, ``continual``,
``sliding-window``, ``intermittent``, ``sketch``, ``demo``; ``evaluate`` runs the
paper-reproduction harness of a source checkout, :mod:`~beam_dpsketch.pipelines.evaluate`).
The DP subcommands release only what their transform releases, with the guarantee it states;
``sketch`` prints exact, non-private estimates.
:mod:`~beam_dpsketch.pipelines.options` holds the shared input and pipeline options and
:mod:`~beam_dpsketch.pipelines.output` the output schema every subcommand writes. Options the
command line does not know are passed to Beam as pipeline options (``--runner`` and the
runner's own).
"""
