"""Certification: an agent run on a family's tasks, graded only on what it left, and the evidence for it.

``lab`` runs one trial (adapter, sandbox, grader chain) and proves and calibrates the
instrument with constructed agents; ``certification`` runs a whole certification and writes its
bundle and contract (``contract``), crash-safe through ``journal``, with a ``heartbeat`` on the
console while trials run; ``held_out``, ``lock``, ``leakscan`` and ``prediction`` are the
sealed held-out acceptance cases; ``mutation`` scores the suite against generated mutants;
``regrade`` and ``publication`` re-derive and compare published bundles; ``user_task`` and
``scaffold`` are a user's own task.

May import: plugin, evidence.
"""
