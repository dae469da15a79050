"""The SDK: what plugins call, beside the contract (``certlab_core.plugin``).

One module per concern, imported by name (``from certlab_core.sdk.command import run_command``);
this package imports none of them, so a process pays only for what it uses:

- ``command``: ``run_command`` and ``run_contained`` (an agent's program, contained and supervised),
  and the process sweeps (``sweep_descendants``, ``become_subreaper``);
- ``containment``: the containment in force (``active_containment``, ``use_containment``), the
  environment a contained program gets, certlab's runtime folder;
- ``workcopy``, ``trees``: work copies (materialise, hash, record changes), bounded tree walks and the
  test modules below a tree's test paths;
- ``safe_io``, ``canonical``: capped readers of hostile files, safe writers, canonical JSON and seals;
- ``looks``, ``report_format``, ``wilson``: the alpha split over looks, how a report's numbers read, and
  the Wilson interval shown beside a rule's for reading;
- ``deadline``: a plugin's call bounded in this process (``plugin_call``: its time, what it raises,
  what it returns) and the waits the environment sets (``CERTLAB_PLUGIN_LOAD_S``);
- ``processes``: the one process layer (forked calls and their deadlines, stopping a group, reaping,
  the child failure record), which ``forking`` (calls and pools), ``zygote`` (preloaded zygotes),
  ``executor`` (isolated stage calls) and ``command`` are built on;
- ``model_boundary``: what a model boundary's recording says (statuses, budgets, the plan);
- ``services``: the installed plugins, the default rule and the containment choice, for a plugin's
  own command.

Held-out cases (their reader, the leak scan of a visible suite's literal calls) are certlab-acceptance's.

May import: plugin.
"""
