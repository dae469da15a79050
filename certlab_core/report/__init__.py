"""The report of a run store: its model (counts, bounds, clusters of failures, fault firings, cost) and its text.

``reading`` reads a store the way the gate does; ``model`` builds the :class:`Report` a reporter
plugin renders; ``text``, ``intervals`` and ``cost`` are its parts; ``files`` writes the JUnit and
Markdown files of ``certlab run`` (through a reporter plugin when one is installed).

May import: plugin, evidence, gate.
"""
