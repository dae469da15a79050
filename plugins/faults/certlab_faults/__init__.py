"""certlab's built-in faults for the A/B gate's tool boundary (distribution certlab-faults)."""
