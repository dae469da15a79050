"""A third party's task family: Roman numerals, three seeded defects."""
