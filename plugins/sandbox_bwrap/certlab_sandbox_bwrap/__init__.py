"""certlab-sandbox-bwrap: bubblewrap for agents and the code they write."""
