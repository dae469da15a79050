"""Evidence on disk: the canonical form and seals, hardened readers of hostile files, the attempt ledger, record files.

Everything certlab writes as evidence (manifests, run stores, bundles, journals) is written and
read through here: ``canonical`` (one JSON form, sealed), ``safe_io`` (reading a file that may
be a FIFO, a device, a symlink out of its folder or a gigabyte), ``integrity`` (the attempt
ledger a gate checks a store against) and ``record_file`` (append-only files with one writer).

May import: plugin.
"""
