"""certlab's model boundary (distribution certlab-model-boundary): a recording, fault-injecting, budgeted, replaying
proxy between an agent CLI and its model API."""
