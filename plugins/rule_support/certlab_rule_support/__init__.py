"""What certlab's two-arm interval rules share: a library they depend on."""
