"""certlab adapter for the Claude Code CLI."""
