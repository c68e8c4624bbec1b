"""The ``beam-dpsketch`` command line: one module per subcommand, each one Beam pipeline.

:mod:`~beam_dpsketch.pipelines.cli` is the entry point (``beam-dpsketch``); every other module
adds one subcommand (``heavy-hitters``, ``frequencies``, ``quantiles``, ``continual``,
``sliding-window``, ``intermittent``, ``sketch``, ``demo``; ``evaluate`` runs the
paper-reproduction harness of a source checkout, :mod:`~beam_dpsketch.pipelines.evaluate`).
The DP subcommands release only what their transform releases, with the guarantee it states;
``sketch`` prints exact, non-private estimates.
The subcommands share one module per concern: :mod:`~beam_dpsketch.pipelines.arguments`
(parsing), :mod:`~beam_dpsketch.pipelines.inputs` (the input options and readers),
:mod:`~beam_dpsketch.pipelines.release_arguments` (privacy budget, noise key, sketch width),
:mod:`~beam_dpsketch.pipelines.runner` (Beam pipeline options and runners),
:mod:`~beam_dpsketch.pipelines.output` (the output schema every subcommand writes),
:mod:`~beam_dpsketch.pipelines.tables` (text tables, keys as JSON) and
:mod:`~beam_dpsketch.pipelines.plotting` (``--plot``). Options the command line does not know
are passed to Beam as pipeline options (``--runner`` and the runner's own).
"""
