"""certlab's intervals family: half-open integer intervals, six defects."""
