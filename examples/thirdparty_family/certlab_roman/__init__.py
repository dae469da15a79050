"""A third party's certlab task family: Roman numerals, with three seeded defects."""
