"""The retry tool world: inventory reservations; agents A, B (a slip), C."""
