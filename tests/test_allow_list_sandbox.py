"""The allow-list sandbox (issue 22): what an agent could reach under the old deny-list, tried as an attacker would.

Each case runs the real CLI inside a private mount namespace (``unshare -m``) with a tmpfs of
its own over the folders it writes to (``/tmp``, ``/dev/shm``, ``/mnt``): a destructive case
never touches the host's folders, and a second copy of the answer key, a harness HOME and a
TMPDIR outside ``/tmp`` and ``/home`` are places the old sandbox showed (it hid only ``/tmp``,
``/home`` and the loaded installation).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_certlab

from certlab_core._runtime.containment import choose_containment
from certlab_core._runtime.registry import discover
from certlab_core.sdk.command import run_contained

bwrap_plugin = pytest.importorskip("certlab_sandbox_bwrap.plugin")
REASON = bwrap_plugin.probe()
needs_bwrap = pytest.mark.skipif(REASON is not None, reason=f"no bwrap sandbox here: {REASON}")
CAN_UNSHARE = shutil.which("unshare") is not None and os.geteuid() == 0
needs_unshare = pytest.mark.skipif(not CAN_UNSHARE, reason="a private mount namespace needs root and unshare")
SECRETS = {
    "GITHUB_TOKEN": "ghp-canary-0001",
    "AWS_SECRET_ACCESS_KEY": "aws-canary-0002",
    "CLAUDE_CODE_OAUTH_TOKEN": "oauth-canary-0003",
    "CERTLAB_SIGNING_KEY": "signing-canary-0004",
}
CREDENTIAL = "npm-credential-canary-0005"
REPO = Path(__file__).resolve().parent.parent


def installed_tree() -> Path:
    import certlab_intervals

    return Path(certlab_intervals.__file__).parent / "family" / "tree"


def certlab_argv(*args: str) -> str:
    return shlex.join([sys.executable, "-m", "certlab_core.cli", *args])


def certify_command(agent: str, *options: str) -> str:
    """``certlab certify`` of the command agent ``agent`` on intervals, without the mutation proof."""
    return certlab_argv("certify", "-f", "intervals", "-a", "command", "--agent-arg", agent, "--no-mutants", *options)


def fresh_tmp() -> str:
    """sh lines that put a fresh tmpfs on /tmp, keeping certlab's own folders where they lie inside it.

    A clone in the temp folder (CI's may be) would vanish under the tmpfs: the host's /tmp is
    bound at /srv first (an empty folder here, in this namespace alone) and each kept folder is
    bound back at its path.
    """
    kept = sorted({str(Path(p).resolve()) for p in (sys.prefix, REPO)} | {os.path.realpath(sys.base_prefix)})
    lines = ["mount --bind /tmp /srv", "mount -t tmpfs tmpfs /tmp"]
    for folder in kept:
        if folder.startswith("/tmp/"):
            inner = shlex.quote(folder)
            lines.append(f"mkdir -p {inner} && mount --bind /srv/{shlex.quote(folder[len('/tmp/') :])} {inner}")
    return "\n        ".join(lines)


def in_private_mounts(script: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``script`` (sh) in a private mount namespace whose mounts never reach the host's."""
    return subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-euc", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def cache_home() -> str:
    """The real cache (the agent environment lives there), kept when a case moves HOME."""
    return os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")


@needs_bwrap
@needs_unshare
@pytest.mark.parametrize("sandbox", ["none", "auto", "bwrap"])
def test_home_and_tmpdir_at_tmp_delete_nothing_of_the_hosts_tmp(sandbox: str) -> None:
    """With HOME=/tmp the old sandbox bound the host's /tmp as the agent's HOME (and the grading server
    emptied what it took for its own HOME): a contained agent that cleans its HOME deleted other users' files.
    Uncontained, the agent runs as the user and is not asked to clean anything (``/bin/true``)."""
    cleaner = "/tmp/agent/cleaner.sh"
    agent = "/bin/true" if sandbox == "none" else cleaner
    out = "/tmp/certification"
    script = f"""
        {fresh_tmp()}
        mount -t tmpfs tmpfs /dev/shm
        mkdir /tmp/agent
        printf '#!/bin/sh\\nrm -rf "$HOME"/* /dev/shm/* 2>/dev/null\\nexit 0\\n' > {cleaner}; chmod 755 {cleaner}
        echo canary > /tmp/canary; echo canary > /dev/shm/canary
        mkdir /tmp/other-user; echo theirs > /tmp/other-user/file
        {certify_command(agent, "--sandbox", sandbox, "-o", out, "-q")} >/dev/null || echo "certify exit $?"
        {certlab_argv("regrade", out, "--sandbox", sandbox)} >/dev/null || echo "regrade exit $?"
        for f in /tmp/canary /dev/shm/canary /tmp/other-user/file; do test -f $f || echo "GONE $f"; done
    """
    env = {**os.environ, "HOME": "/tmp", "TMPDIR": "/tmp", "XDG_CACHE_HOME": cache_home()}
    done = in_private_mounts(script, env)
    assert done.returncode == 0, done.stderr
    assert "GONE" not in done.stdout, done.stdout + done.stderr
    assert "certify exit" not in done.stdout and "regrade exit" not in done.stdout, done.stdout + done.stderr


@needs_bwrap
@needs_unshare
def test_no_other_copy_of_the_key_no_harness_socket_home_or_secret_is_in_reach(tmp_path: Path) -> None:
    """The old sandbox showed everything but /tmp, /home and the loaded installation: a second checkout
    (6/6 fixed by copying it), the slot keepers' sockets in a TMPDIR elsewhere, the harness's HOME with
    a 0600 credential, and every secret of its environment landed in the bundle."""
    agent = tmp_path / "attacker.sh"
    agent.write_text(
        "#!/bin/sh\n"
        "echo SOCKETS: $(find / -path /proc -prune -o -path /usr -prune -o -type s -print 2>/dev/null)\n"
        "copy=$(find / -path /proc -prune -o -path /usr -prune -o -path '*/family/tree/intervals.py' -print"
        " 2>/dev/null | head -n 1)\n"
        'echo COPY: "$copy"; [ -n "$copy" ] && cp "$copy" intervals.py\n'
        "cat /mnt/harness-home/.npmrc 2>/dev/null\n"
        "env\n"
    )
    agent.chmod(0o755)
    out = tmp_path / "out"
    script = f"""
        mount -t tmpfs tmpfs /mnt
        mkdir -p /mnt/other-checkout/certlab_intervals/family /mnt/tmpdir /mnt/harness-home
        cp -r {shlex.quote(str(installed_tree()))} /mnt/other-checkout/certlab_intervals/family/tree
        echo "//registry/:_authToken={CREDENTIAL}" > /mnt/harness-home/.npmrc; chmod 600 /mnt/harness-home/.npmrc
        {certify_command(str(agent), "-w", "2", "-o", str(out), "-q")} || echo "certify exit $?"
        {certlab_argv("regrade", str(out))} >/dev/null || echo "regrade exit $?"
        ls -d /mnt/tmpdir/certlab-* 2>/dev/null | sed 's/^/LEFT /' || true
    """
    env = {
        **os.environ,
        **SECRETS,
        "HOME": "/mnt/harness-home",
        "TMPDIR": "/mnt/tmpdir",
        "XDG_CACHE_HOME": cache_home(),
    }
    done = in_private_mounts(script, env)
    assert done.returncode == 0, done.stderr
    assert "LEFT" not in done.stdout, f"certlab left folders in TMPDIR: {done.stdout}"
    assert "regrade exit" not in done.stdout, done.stdout
    bundle_text = (out / "bundle.json").read_text()
    bundle = json.loads(bundle_text)
    assert [t["verdict"] for t in bundle["trials"]] == ["not-fixed"] * 6, done.stdout
    assert "SOCKETS:" in bundle_text and "COPY:" in bundle_text, "the attacker's output is not in the bundle"
    assert "/mnt/other-checkout" not in bundle_text
    assert "slot-" not in bundle_text and "certlab-runtime-" not in bundle_text, "a harness socket is in reach"
    assert CREDENTIAL not in bundle_text
    for name, value in SECRETS.items():
        assert value not in bundle_text, f"{name} reached the agent"
    assert set(bundle["containment"]["environment"]) >= {"PATH"}


@needs_bwrap
def test_a_cli_installed_in_a_folder_the_old_sandbox_hid_runs_without_declaring_it(tmp_path: Path) -> None:
    """The documented adapter pattern (``run_command`` without ``readable=``) ran a CLI installed under /tmp:
    the old sandbox hid it, the exec failed, and the certification said 'fixed 0/5'. Its runtime is resolved."""
    prefix = tmp_path / "prefix"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "lib").mkdir()
    (prefix / "lib" / "message.txt").write_text("from the CLI's own prefix\n")
    cli = prefix / "bin" / "my-agent-cli"
    cli.write_text(
        "#!/usr/bin/env python3\nimport pathlib, sys\n"
        "print(pathlib.Path(sys.argv[0]).resolve().parent.parent.joinpath('lib/message.txt').read_text())\n"
    )
    cli.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    registry = discover()
    containment = choose_containment(registry, "bwrap", [], lambda _line: None)
    output = tmp_path / "stdout"
    with output.open("wb") as stdout:
        run = run_contained(
            [str(cli)], cwd=str(work), env={"PATH": os.defpath}, timeout_s=30, stdout=stdout, containment=containment
        )
    assert run.status == "completed" and run.exit_code == 0, run
    assert "from the CLI's own prefix" in output.read_text()


@needs_bwrap
def test_a_program_inside_certlabs_installation_is_unstartable_in_one_line(tmp_path: Path) -> None:
    """A CLI in certlab's own venv cannot be shown without the answer key: the run is not started, never graded."""
    work = tmp_path / "work"
    work.mkdir()
    containment = choose_containment(discover(), "bwrap", [], lambda _line: None)
    inside = str(Path(sys.executable).parent / "certlab")
    run = run_contained(
        [inside, "--help"], cwd=str(work), env={"PATH": os.defpath}, timeout_s=30, containment=containment
    )
    assert run.status == "unstartable"
    assert "hidden from the agent" in run.detail and "install it elsewhere" in run.detail
    assert "\n" not in run.detail


@needs_bwrap
def test_the_harness_home_and_temp_folder_are_never_bound_writable(tmp_path: Path) -> None:
    containment = choose_containment(discover(), "bwrap", [], lambda _line: None)
    import tempfile

    run = run_contained(
        ["/bin/true"], cwd=tempfile.gettempdir(), env={"PATH": os.defpath}, timeout_s=30, containment=containment
    )
    assert run.status == "unstartable" and "does not bind" in run.detail


@needs_bwrap
def test_an_agent_whose_interpreter_the_sandbox_hides_is_unavailable_not_a_failed_fix(tmp_path: Path) -> None:
    """A hidden dependency was graded as the agent's failure ('fixed 0/5', exit 0); now every trial is
    agent-unavailable, with one line before the first trial naming the path and what to declare."""
    agent = tmp_path / "agent.py"
    agent.write_text(f"#!{sys.executable}\nprint('an agent run by certlab own interpreter')\n")
    agent.chmod(0o755)
    out = tmp_path / "out"
    done = run_certlab(
        "certify", "-f", "intervals", "-a", "command", "--agent-arg", str(agent), "--no-mutants", "-o", str(out), "-q"
    )
    bundle = json.loads((out / "bundle.json").read_text())
    assert [t["verdict"] for t in bundle["trials"]] == ["unavailable"] * 6
    assert {t["failure_mode"] for t in bundle["trials"]} == {"agent-unavailable"}
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning: command:")]
    assert len(warnings) == 1 and "hidden from the agent" in warnings[0] and "install it elsewhere" in warnings[0]
    assert done.returncode != 0


@needs_bwrap
def test_a_fifo_named_as_the_program_does_not_hang_its_resolution(tmp_path: Path) -> None:
    """Resolving a program reads its ``#!`` line: a FIFO named as the program blocked open() for ever."""
    program = tmp_path / "bin" / "tool"
    program.parent.mkdir()
    os.mkfifo(program)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from certlab_sandbox_bwrap import runtime; print(runtime.resolve(sys.argv[1], {}).shown)",
            str(program),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0 and str(tmp_path) in done.stdout, done.stderr  # its bin/ prefix, resolved


@pytest.mark.parametrize(
    ("programs", "said"),
    [(lambda args: 1 / 0, "raised ZeroDivisionError"), (lambda args: "/bin/sh", "returned str, not a list of paths")],
)
def test_an_adapters_programs_that_raise_or_name_no_list_are_one_line(programs: object, said: str) -> None:
    from certlab_core.certify.program_check import declared_programs
    from certlab_core.plugin import AgentAdapter, AgentOutcome, InstrumentError

    adapter = AgentAdapter(
        name="odd", description="", run=lambda r: AgentOutcome(status="completed"), programs=programs
    )
    with pytest.raises(InstrumentError, match=said):  # the plugin's failure, exit 3, as its other callables
        declared_programs(adapter, ())
