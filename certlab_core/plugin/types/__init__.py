"""The contract's record types, one module per kind, on one base (``Record``).

``certlab_core.plugin`` re-exports each hook's record and the values its main callable
exchanges; the rest of a kind (its protocols, ``Literal`` word sets and secondary records)
is imported from the kind's module here. This package imports nothing of its own: import a
kind module by name (``from certlab_core.plugin.types.agent import AgentStatus``).
"""
