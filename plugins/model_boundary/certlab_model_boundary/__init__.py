"""certlab's model boundary: a proxy between an agent CLI and its model API.

Distribution certlab-model-boundary: a recording, fault-injecting, budgeted, replaying
proxy between an agent CLI and its model API.
"""
