"""The kernel's CLI commands, one module per command group, each with ``register(app)``."""
