"""certlab's command adapter: any command-line agent in the work copy."""
