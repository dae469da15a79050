"""Build the tests' wheelhouse quickly: ``python tools/build_wheelhouse.py REQUIREMENTS FOLDER``.

The wheelhouse holds a wheel of every ``-e FOLDER`` distribution of the requirements file, with
their third-party dependencies and setuptools and wheel, so that a test can install a third
party's distribution into a fresh environment with no network. ``pip wheel`` of the folders
started three setuptools processes per distribution, about a second of CPU each, when the
builds take a tenth of that: here every wheel is built in this one process (as
``install_editables.py`` builds the editable ones), then one ``pip wheel`` run adds their
dependencies. Run it with the development environment's python (setuptools 77 or later).

Exit codes: 0 built, 2 a line or a folder it does not handle (said in one line), else pip's.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from install_editables import build_wheels, requirements_or_none


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python tools/build_wheelhouse.py REQUIREMENTS FOLDER", file=sys.stderr)
        return 2
    read = requirements_or_none("build_wheelhouse", argv[0])
    if read is None:
        return 2
    folders, _plain = read
    wheelhouse = Path(argv[1]).resolve()
    wheelhouse.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="certlab-wheels-") as scratch:
        wheels = build_wheels(folders, Path(scratch), editable=False)
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", "wheel", "-w", str(wheelhouse)]
        return subprocess.run([*pip, *map(str, wheels), "setuptools", "wheel"], check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
