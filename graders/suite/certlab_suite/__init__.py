"""certlab's suite grader: the visible tests in a fresh process, counted."""
