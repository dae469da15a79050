"""certlab's acceptance grader: held-out cases, each in a fresh process."""
