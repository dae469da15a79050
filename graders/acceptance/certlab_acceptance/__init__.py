"""certlab's acceptance grader: held-out cases, each in its own fresh process of the submitted code."""
