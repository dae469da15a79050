"""certlab's pytest plugin: fixtures for plugin authors and the family conformance suite."""
