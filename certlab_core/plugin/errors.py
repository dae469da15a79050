"""Exit codes and the one exception the CLI turns into a single clear line."""

from __future__ import annotations

from typing import Final

# Gate verdicts double as exit codes; certification and regrade use the same numbers.
EXIT_OK = 0
EXIT_PASS = 0
EXIT_BLOCK = 1
EXIT_MISMATCH = 1
EXIT_INCONCLUSIVE = 2
EXIT_STALE = 2
EXIT_ERROR = 3
EXIT_USAGE = 4


class ExitCode:
    """The exit codes as one namespace (``ExitCode.BLOCK``): the same numbers as the ``EXIT_*`` constants."""

    OK: Final = EXIT_OK
    PASS: Final = EXIT_PASS
    BLOCK: Final = EXIT_BLOCK
    MISMATCH: Final = EXIT_MISMATCH
    INCONCLUSIVE: Final = EXIT_INCONCLUSIVE
    STALE: Final = EXIT_STALE
    ERROR: Final = EXIT_ERROR
    USAGE: Final = EXIT_USAGE


class CertlabError(Exception):
    """An error a user can act on: ``message`` is one line (what, where, what to do)."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class UsageError(CertlabError):
    """Bad arguments or bad input files: exit 4."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_USAGE)


class InstrumentError(CertlabError):
    """The instrument (a family, a grader, the store) is broken or tampered with: exit 3."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_ERROR)
