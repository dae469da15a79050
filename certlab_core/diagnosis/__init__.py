"""Diagnosis of a run: diff two trials, minimise a failure, bundle it, and replay the bundle offline.

May import: plugin, evidence, certify, gate, report.
"""
