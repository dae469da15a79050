"""certlab's policy grader: suite unchanged, edits in bounds, none planted."""
