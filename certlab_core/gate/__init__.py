"""The A/B reliability gate: descriptor, sealed manifest, schedule, tool boundary, trial runner, run store, decision."""
