"""Certification: an agent run on a family's tasks, graded on what it left.

``lab`` runs one trial (adapter, sandbox, grader chain), ``trial_runs`` many at once (forked
here or on an executor), and ``instrument`` proves and calibrates the instrument with
constructed agents; ``certification`` runs a whole certification and writes its bundle
(``bundle_documents``) and contract (``contract``), crash-safe through ``journal``, with a
``heartbeat`` on the console while trials run; ``acceptance`` reaches the sealed held-out acceptance cases through
the ``certlab_held_out`` hook (their locks, leak scan and predictions are certlab-acceptance's)
and a user's own task through the ``certlab_task_sources`` hook; ``instrument_proofs`` reaches
the proofs plugins measure beyond the seeded defects (the mutation proof is certlab-mutation's),
and ``proving`` runs ``certlab prove``; ``regrade`` re-derives published bundles
(``certlab compare`` is certlab-compare's).

May import: plugin, sdk, _runtime, evidence.
"""
