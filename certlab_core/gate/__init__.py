"""The A/B reliability gate: descriptor, sealed manifest, schedule, tool boundary, trial runner, run store, decision.

A coding arm's trial is a certification trial (``certify.lab``), run and graded the same way.

May import: plugin, sdk, _runtime, evidence, certify.
"""
