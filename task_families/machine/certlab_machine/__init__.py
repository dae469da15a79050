"""certlab's machine family: an expression interpreter, six defects."""
