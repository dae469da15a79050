"""certlab's suite grader: run the visible tests in a fresh process and count them through pytest's hooks."""
