"""certlab's machine task family: a four-module expression interpreter with six seeded defects."""
