"""certlab's command adapter: run any command-line agent in the task's work copy."""
