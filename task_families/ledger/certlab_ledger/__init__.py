"""certlab's ledger family: a three-module ledger with six seeded defects."""
