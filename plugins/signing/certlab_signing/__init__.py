"""Signed certlab evidence (see :mod:`certlab_signing.evidence`): who produced a folder, and that none of it moved."""
