"""certlab adapter for the aider CLI."""
