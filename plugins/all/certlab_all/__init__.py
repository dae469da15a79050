"""certlab-all: the kernel and every built-in plugin as one thing to install."""
