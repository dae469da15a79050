"""Exit codes and the one exception type that the CLI turns into a single clear line."""

from __future__ import annotations

# Gate verdicts double as exit codes; certification and regrade use the same numbers.
EXIT_OK = 0
EXIT_PASS = 0
EXIT_BLOCK = 1
EXIT_MISMATCH = 1
EXIT_INCONCLUSIVE = 2
EXIT_STALE = 2
EXIT_ERROR = 3
EXIT_USAGE = 4


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
