"""certlab-diagnosis: from a gate's verdict to its cause; a trial re-run.

``diff`` finds where two trials' recorded boundary events part (``diff``), ``minimize`` runs
ddmin over a failed trial's injected faults (``minimize``), ``bundle`` writes one sealed,
portable reproducer of a trial (``bundle``), and ``replay`` re-runs it against its recording,
or a certification's trial against its recorded model calls (``replay``).

A kernel companion: unlike a third party's plugin, it imports parts of the kernel beyond the
author API (the gate's store, runner and events, the certification's lab), so it is released
with the kernel at the same version. tests/test_author_api.py lists what it may import.
"""
