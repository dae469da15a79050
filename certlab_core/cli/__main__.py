"""``python -m certlab_core.cli``: the ``certlab`` command."""

import sys

from certlab_core.cli import main

sys.exit(main())
