"""certlab adapter for the Codex CLI."""
