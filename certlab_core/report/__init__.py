"""A run store's report: its model (counts, bounds, clusters, cost).

``reading`` reads a store the way the gate does; ``model`` builds the :class:`Report` a reporter
plugin renders (the plain text too: certlab-report-text's ``text``); ``intervals`` and ``cost``
are its parts; ``files`` writes the reports ``--junit`` and ``--markdown`` ask for, through the
``junit`` and ``markdown`` reporter plugins.

May import: plugin, sdk, _runtime, evidence, gate.
"""
