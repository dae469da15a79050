"""certlab compare: the published record, COMPARISON.md and registry.json."""
