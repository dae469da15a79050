"""certlab's built-in faults for the gate's tool boundary (certlab-faults)."""
