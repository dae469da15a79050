"""The adversarial suite: constructed cheating agents, each with the verdict and failure mode it must get."""
