"""Evidence on disk: the attempt ledger and append-only record files.

Everything certlab writes as evidence (manifests, run stores, bundles, journals) is written in
the canonical form and read by the hardened readers of ``certlab_core.sdk.canonical`` and
``certlab_core.sdk.safe_io`` (a plugin sealing or reading a document of its own does it the
same way); here are ``integrity`` (the attempt ledger a gate checks a store against) and
``record_file`` (append-only files with one writer).

May import: plugin, sdk.
"""
