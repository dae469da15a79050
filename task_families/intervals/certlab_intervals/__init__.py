"""certlab's intervals task family: half-open integer intervals with six seeded defects."""
