"""The A/B reliability gate: from descriptor to sealed manifest to decision.

A coding arm's trial is a certification trial (``certify.lab``), run and graded the same way.

May import: plugin, sdk, _runtime, evidence, certify.
"""
