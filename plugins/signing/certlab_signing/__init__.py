"""Signed certlab evidence: who produced a folder, and that none of it moved."""
