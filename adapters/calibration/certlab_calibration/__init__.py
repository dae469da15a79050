"""certlab's constructed agents, whose scores are known in advance and so prove the instrument."""
