"""What certlab's two-arm interval rules (clopper-pearson, newcombe) share; a library their plugins depend on."""
