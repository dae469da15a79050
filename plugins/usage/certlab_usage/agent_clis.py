"""What the real CLI adapters share: options, finding the CLI, env, a home.

An adapter for a real CLI (``claude-code``, ``aider``, ``codex``) takes its options as agent
arguments, ``--name=value`` or ``--name value`` (``certlab certify --agent-arg --model=X``, or
``args: ["--model=X"]`` in a gate arm). It finds its executable, in this order: the ``--bin``
option, the adapter's environment variable (``CERTLAB_CLAUDE_BIN``, ``CERTLAB_AIDER_BIN``,
``CERTLAB_CODEX_BIN``), ``PATH``, then the cache the Makefile installs the pinned CLIs into,
``${XDG_CACHE_HOME:-~/.cache}/certlab/clis``.

Each run gets a fresh ``HOME`` outside the work copy (the CLI's configuration, history and
caches land there, never in the evidence) and an environment built from a short list of the
harness's variables: the CLI sees no key or proxy it was not given on purpose. :class:`Cli` is
that run, and the binary and version checks of a preflight, for one CLI.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from attrs import frozen

from certlab_core.plugin import AgentOutcome, AgentRequest, UsageError
from certlab_core.plugin.types.agent import PreflightCheck

CACHE_SUBDIR = ("certlab", "clis")
# A version number as a CLI prints it: 2.1.197, 0.171.0, 0.86.2.dev3
VERSION_NUMBER = re.compile(r"\d+\.\d+\.\d+[\w.+-]*")
# The harness variables every CLI run keeps (the rest of the harness's environment stays behind).
KEPT_VARIABLES = ("PATH", "LANG", "LC_ALL", "TZ", "SSL_CERT_FILE", "SSL_CERT_DIR")
# certlab's own variables for the agent (the prompt, its file, the task id) are kept too.
KEPT_PREFIX = "CERTLAB_"
# Variables that keep Claude Code's connections on the model API alone.
CLAUDE_QUIET = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
}


@frozen
class OptionSpec:
    """The options an adapter accepts: ``values`` take one value, ``repeated`` may be given many times."""

    adapter: str
    values: tuple[str, ...]
    repeated: tuple[str, ...] = ()


def parse_options(spec: OptionSpec, args: Sequence[str]) -> dict[str, list[str]]:
    """``--name=value`` / ``--name value`` pairs into ``{name: [values]}``; anything else is a UsageError."""
    found: dict[str, list[str]] = {}
    words = list(args)
    known = sorted({*spec.values, *spec.repeated})
    while words:
        word = words.pop(0)
        if not word.startswith("--") or len(word) < 3:
            raise UsageError(
                f"the {spec.adapter} adapter takes options like --model=NAME, not {word!r}; "
                f"its options: {', '.join('--' + k for k in known)}"
            )
        name, has_value, value = word[2:].partition("=")
        if name not in spec.values and name not in spec.repeated:
            raise UsageError(
                f"the {spec.adapter} adapter has no option --{name}; its options: {', '.join('--' + k for k in known)}"
            )
        if not has_value:
            if not words:
                raise UsageError(f"the {spec.adapter} adapter's option --{name} needs a value")
            value = words.pop(0)
        if name in spec.values and name in found:
            raise UsageError(f"the {spec.adapter} adapter's option --{name} is given twice")
        found.setdefault(name, []).append(value)
    return found


def one(options: Mapping[str, Sequence[str]], name: str, default: str | None = None) -> str | None:
    """The single value of an option, or ``default``."""
    values = options.get(name)
    return values[-1] if values else default


def positive_int(adapter: str, name: str, value: str | None, default: int) -> int:
    """An option's value as a positive integer (a UsageError naming it otherwise)."""
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0 or (number == 0 and not name.endswith("max-retries")):  # a retry count may be 0
        raise UsageError(f"the {adapter} adapter's --{name} must be a positive whole number (got {value!r})")
    return number


def cli_cache(env: Mapping[str, str]) -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/certlab/clis``, where the Makefile installs the pinned CLIs."""
    base = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".cache")
    return Path(base).joinpath(*CACHE_SUBDIR)


def find_cli(
    adapter: str,
    program: str,
    *,
    explicit: str | None,
    variable: str,
    cached: str,
    env: Mapping[str, str],
) -> str:
    """The CLI's executable: ``explicit`` (``--bin``), then ``$variable``, ``PATH``, the cache; else a UsageError.

    ``cached`` is the executable's path relative to the cache (``npm/node_modules/.bin/claude``).
    """
    for source, candidate in (("--bin", explicit), (variable, env.get(variable))):
        if candidate:
            path = Path(candidate)
            if not path.is_file() or not os.access(path, os.X_OK):
                raise UsageError(f"the {adapter} adapter's {source} {candidate} is not an executable file")
            return str(path)
    on_path = shutil.which(program, path=env.get("PATH"))
    if on_path:
        return on_path
    in_cache = cli_cache(env) / cached
    if in_cache.is_file() and os.access(in_cache, os.X_OK):
        return str(in_cache)
    raise UsageError(
        f"the {adapter} adapter cannot find {program}: give --bin=PATH or set {variable}, put it on PATH, "
        "or install the pinned CLIs with `make clis` (into ${XDG_CACHE_HOME:-~/.cache}/certlab/clis)"
    )


def quiet_environment(harness: Mapping[str, str], home: Path, extra: Mapping[str, str]) -> dict[str, str]:
    """The CLI's environment: a few of the harness's variables, a fresh HOME and TMPDIR, then ``extra``."""
    env = {name: harness[name] for name in KEPT_VARIABLES if name in harness}
    env.update({name: value for name, value in harness.items() if name.startswith(KEPT_PREFIX)})
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.setdefault("LANG", "C.UTF-8")
    tmp = home / "tmp"
    tmp.mkdir(exist_ok=True)
    env.update({"HOME": str(home), "TMPDIR": str(tmp), "TERM": "dumb", "NO_COLOR": "1"})
    # An agent that runs the tests must not plant bytecode or a pytest cache by accident.
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env


@contextlib.contextmanager
def scratch_home(adapter: str) -> Iterator[Path]:
    """A fresh HOME for one run, outside every work copy, removed afterwards."""
    from certlab_core.sdk import trees

    with trees.temporary_folder(f"certlab-{adapter}-home-") as made:  # the agent writes here: removed iteratively
        yield made.as_path


def cli_version(executable: str, harness: Mapping[str, str], timeout_s: float = 60.0) -> str:
    """What ``executable --version`` prints (its first version number), run with a fresh HOME."""
    with scratch_home("version") as home:
        try:
            done = subprocess.run(
                [executable, "--version"],
                env=quiet_environment(harness, home, CLAUDE_QUIET),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as error:
            return f"unknown ({error})"
    text = done.stdout + done.stderr
    match = VERSION_NUMBER.search(text)
    return match.group(0) if match else (text.strip().splitlines() or ["unknown"])[0]


def not_started(reason: str) -> AgentOutcome:
    """The outcome of a run whose CLI could not be found: ``unavailable``, saying why."""
    return AgentOutcome(status="unavailable", exit_code=None, stdout_tail="", stderr_tail="", wall_s=0.0, detail=reason)


def one_line(text: str, limit: int = 300) -> str:
    """``text`` as one line for a detail (each run of whitespace, newlines included, one space), cut to ``limit``."""
    return " ".join(text.split())[:limit]


def last_line(text: str, limit: int = 300) -> str:
    """The last non-empty line of ``text``, cut to ``limit`` characters."""
    for line in reversed(text.splitlines()):
        if line.strip():
            return line.strip()[:limit]
    return ""


@frozen
class Cli:
    """One real agent CLI as its adapter drives it: found, run once in a scratch HOME, judged; checked before."""

    adapter: str  # the adapter's name (claude-code)
    program: str  # the executable's name on PATH (claude)
    variable: str  # the environment variable naming the executable (CERTLAB_CLAUDE_BIN)
    cached: str  # the executable's path in the cache of pinned CLIs (npm/node_modules/.bin/claude)

    def find(self, options: Mapping[str, Sequence[str]], env: Mapping[str, str]) -> str:
        """The executable (see :func:`find_cli`); a UsageError naming where it looked."""
        return find_cli(
            self.adapter,
            self.program,
            explicit=one(options, "bin"),
            variable=self.variable,
            cached=self.cached,
            env=env,
        )

    def run(
        self,
        request: AgentRequest,
        options: Mapping[str, Sequence[str]],
        argv: Callable[[str, Path], list[str]],
        environment: Callable[[Path], dict[str, str]],
        judge: Callable[[AgentOutcome], AgentOutcome],
        readable: Sequence[str] = (),
    ) -> AgentOutcome:
        """Run the CLI once: ``argv(executable, home)`` with ``environment(home)``, exit codes decide nothing.

        A CLI that cannot be found is ``unavailable`` (the agent's own infrastructure is missing).
        ``readable`` are files of the user's the CLI reads (a model metadata file), shown to it in a
        sandbox; the CLI's own installation is shown as the program's runtime.
        """
        from certlab_core.sdk.command import run_command  # the process machinery, imported by a run, not by discovery

        try:
            executable = self.find(options, {**os.environ, **request.env})  # --bin's variable is the harness's
        except UsageError as error:
            return not_started(str(error))
        with scratch_home(self.adapter) as home:
            outcome = run_command(
                request,
                argv(executable, home),
                env=environment(home),
                unavailable_exit_codes=(),
                writable=(str(home),),  # the run's own HOME, made here: the sandbox binds it as the agent's HOME
                readable=tuple(readable),
            )
        return judge(outcome)

    def programs(self, options: Mapping[str, Sequence[str]], harness: Mapping[str, str]) -> list[str]:
        """The program a run starts, for the check inside the containment before the first trial ([]: not found,
        which the run reports as unavailable itself)."""
        try:
            return [self.find(options, harness)]
        except UsageError:
            return []

    def reported_version(self, options: Mapping[str, Sequence[str]], harness: Mapping[str, str]) -> str | None:
        """The version the CLI reports of itself (``--version``, as preflight reads it); None when it cannot tell."""
        try:
            executable = self.find(options, harness)
        except UsageError:
            return None
        version = cli_version(executable, harness)
        return version if VERSION_NUMBER.fullmatch(version) else None

    def binary_checks(
        self, options: Mapping[str, Sequence[str]], harness: Mapping[str, str]
    ) -> tuple[str | None, list[PreflightCheck]]:
        """A preflight's first checks, the binary and its version, and the executable (None when not found)."""
        try:
            executable = self.find(options, harness)
        except UsageError as error:
            return None, [PreflightCheck("binary", False, str(error))]
        return executable, [
            PreflightCheck("binary", True, executable),
            PreflightCheck("version", True, cli_version(executable, harness)),
        ]
