"""A small double-entry ledger: models parse a journal, validate checks it, report summarises it."""
