"""certlab's ledger task family: a three-module double-entry ledger with six seeded defects."""
