"""certlab's constructed agents: known scores that prove the instrument."""
