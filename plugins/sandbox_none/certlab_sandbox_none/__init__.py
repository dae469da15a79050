"""certlab's uncontained choice, ``--sandbox none``: run as the user."""
