"""A certlab adapter for fixbot, a made-up agent CLI: all in plugin.py."""
