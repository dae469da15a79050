"""A third party's certlab task family: Roman numerals, with five seeded defects."""
