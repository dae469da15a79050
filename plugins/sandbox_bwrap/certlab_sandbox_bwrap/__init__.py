"""certlab-sandbox-bwrap: the bubblewrap sandbox for agents and the code they write."""
