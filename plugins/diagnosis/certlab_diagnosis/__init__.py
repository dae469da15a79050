"""certlab-diagnosis: from a gate's verdict to its cause; a trial re-run.

``diff`` finds where two trials' recorded boundary events part (``diff``), ``minimize`` runs
ddmin over a failed trial's injected faults (``minimize``), ``bundle`` writes one sealed,
portable reproducer of a trial (``bundle``), and ``replay`` re-runs it against its recording,
or a certification's trial against its recorded model calls (``replay``).

An ordinary plugin: it imports the contract and the SDK alone, and works on run stores and
certifications through the services the kernel hands its commands' ``register(app, services)``
(``certlab_core.plugin.Services``).
"""
