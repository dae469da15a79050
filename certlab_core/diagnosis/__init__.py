"""Diagnosis: read a run store into a report, diff two trials, minimise, bundle, replay and re-derive."""
