"""A certlab adapter for fixbot, a made-up agent CLI: the whole of it is plugin.py."""
