"""The retry tool world for the A/B gate: inventory reservations; agents A (baseline), B (a slip), C (repaired)."""
