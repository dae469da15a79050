"""A plugin command's code in a fresh interpreter, with services of its own.

``python -m certlab_core.cli.child MODULE:FUNCTION ARGS...`` is the interpreter that
``Services.child_argv`` starts: it calls ``FUNCTION(services, *ARGS)``
with services of its own (plugins are discovered only when a service needs them, after the
function has set up its process) and exits with the number the function returns.
"""

from __future__ import annotations

import importlib
import sys

from certlab_core.cli.services import services_for


def main(argv: list[str]) -> int:
    if not argv or ":" not in argv[0]:
        print("usage: python -m certlab_core.cli.child MODULE:FUNCTION [ARGS...]", file=sys.stderr)
        return 2
    module_name, _, name = argv[0].partition(":")
    function = getattr(importlib.import_module(module_name), name)
    returned = function(services_for(), *argv[1:])
    return returned if isinstance(returned, int) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
