"""certlab's policy grader: the visible suite is byte-identical, edits stay in bounds, nothing is planted."""
