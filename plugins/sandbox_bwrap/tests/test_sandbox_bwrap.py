"""The bwrap sandbox: what a contained program cannot see or reach, its limits, and that its processes die with it."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import tempfile
import textwrap
import threading
from pathlib import Path

import attrs
import pytest
from certlab_sandbox_bwrap import slots

from certlab_core.plugin.types.sandbox import Containment, ResourceLimits
from certlab_core.sdk.command import ContainedRun, run_contained
from certlab_core.sdk.services import choose_containment

REASON = __import__("certlab_sandbox_bwrap.plugin", fromlist=["probe"]).probe()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"no bwrap sandbox here: {REASON}")


@pytest.fixture(scope="module")
def containment(tmp_path_factory: pytest.TempPathFactory) -> Containment:
    experiment = tmp_path_factory.mktemp("experiment")
    (experiment / "certlab.yaml").write_text("secret: the experiment\n")
    return choose_containment("bwrap", [str(experiment)], lambda _line: None)


def contained_python(
    containment: Containment, work: Path, source: str, limits: ResourceLimits | None = None, **kwargs: object
) -> tuple[ContainedRun, str]:
    work.mkdir(parents=True, exist_ok=True)
    out = work.parent / f"{work.name}.out"
    chosen = attrs.evolve(containment, limits=limits) if limits else containment
    with out.open("wb") as handle:
        run = run_contained(
            [chosen.python(), "-c", textwrap.dedent(source)],
            cwd=str(work),
            env=dict(os.environ),
            timeout_s=60,
            stdout=handle,
            stderr=handle,
            containment=chosen,
            **kwargs,  # type: ignore[arg-type]
        )
    return run, out.read_text()


def test_the_answer_key_the_experiment_and_other_trials_are_out_of_reach(
    containment: Containment, tmp_path: Path
) -> None:
    import certlab_intervals

    family_file = Path(certlab_intervals.__file__).parent / "family" / "tree" / "intervals.py"
    experiment = next(Path(p) for p in containment.hidden if Path(p, "certlab.yaml").exists())
    other = tmp_path / "other-trial" / "work"
    other.mkdir(parents=True)
    (other / "intervals.py").write_text("the other trial's fix\n")
    source = f"""
        import json, os, sys
        seen = {{}}
        try:
            import certlab_intervals
            seen["import"] = "imported"
        except ImportError:
            seen["import"] = "refused"
        for name, path in [("family", {str(family_file)!r}), ("experiment", {str(experiment / "certlab.yaml")!r}),
                           ("other", {str(other / "intervals.py")!r})]:
            try:
                open(path).read()
                seen[name] = "read"
            except OSError:
                seen[name] = "refused"
        import pytest
        open("written.txt", "w").write("mine")
        seen["pytest"] = pytest.__name__
        seen["home"] = os.environ["HOME"]
        print(json.dumps(seen))
    """
    run, out = contained_python(containment, tmp_path / "work", source)
    assert run.status == "completed", out
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen == {
        "import": "refused",
        "family": "refused",
        "experiment": "refused",
        "other": "refused",
        "pytest": "pytest",
        "home": "/home/agent",
    }
    assert (tmp_path / "work" / "written.txt").read_text() == "mine"
    assert family_file.is_file() and (other / "intervals.py").is_file()  # hidden inside, untouched outside


def test_a_contained_program_cannot_unmount_what_hides_the_answer_key(containment: Containment, tmp_path: Path) -> None:
    """Run as root, bwrap keeps the caller's capabilities unless told otherwise: with CAP_SYS_ADMIN, ``umount``
    of the tmpfs over an installed family showed its clean tree (measured before ``--cap-drop ALL``)."""
    import certlab_intervals

    family_dir = Path(certlab_intervals.__file__).parent / "family"
    hiding = next(
        p for p in containment.hidden if str(family_dir).startswith(p.rstrip("/") + "/") or p == str(family_dir)
    )
    source = f"""
        import ctypes, json, os
        libc = ctypes.CDLL(None, use_errno=True)
        unmounted = libc.umount2({hiding!r}.encode(), 2) == 0  # MNT_DETACH
        status = dict(line.split(":", 1) for line in open("/proc/self/status") if line.startswith("Cap"))
        try:
            open({str(family_dir / "tree" / "intervals.py")!r}).read()
            key = "read"
        except OSError:
            key = "refused"
        print(json.dumps({{"unmounted": unmounted, "key": key, "effective": status["CapEff"].strip()}}))
    """
    run, out = contained_python(containment, tmp_path / "work", source)
    assert run.status == "completed", out
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen == {"unmounted": False, "key": "refused", "effective": "0000000000000000"}


def test_no_network_but_a_bound_boundary_socket(containment: Containment, tmp_path: Path) -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    boundary = tmp_path / "boundary.sock"
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(str(boundary))
    unix.listen()

    def answer() -> None:
        connection, _ = unix.accept()
        connection.sendall(b"boundary here")
        connection.close()

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    source = f"""
        import socket
        for address in [("127.0.0.1", {port}), ("1.1.1.1", 53)]:
            s = socket.socket()
            s.settimeout(2)
            try:
                s.connect(address)
                print("reached", address)
            except OSError:
                print("unreachable", address[0])
        u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        u.connect({str(boundary)!r})
        print(u.recv(100).decode())
    """
    run, out = contained_python(containment, tmp_path / "work", source, relay_sockets=[str(boundary)])
    server.close()
    thread.join(timeout=5)
    unix.close()
    assert run.status == "completed", out
    assert out.split("\n")[:3] == ["unreachable 127.0.0.1", "unreachable 1.1.1.1", "boundary here"]


@pytest.mark.parametrize(
    ("limit", "limits", "source"),
    [
        ("file-size", ResourceLimits(file_bytes=1 << 20), "open('big', 'wb').write(b'x' * (4 << 20))"),
        ("cpu", ResourceLimits(cpu_s=1), "while True: pass"),
        (
            "processes",
            ResourceLimits(processes=20),
            "import os, time\nfor _ in range(60):\n    try:\n        pid = os.fork()\n    except OSError:\n"
            "        break\n    if pid == 0:\n        time.sleep(30)\n        os._exit(0)\nos._exit(1)",
        ),
        ("memory", ResourceLimits(memory_bytes=64 << 20), "blocks = [bytearray(1 << 20) for _ in range(512)]"),
    ],
)
@pytest.mark.parametrize("in_a_slot", [False, True], ids=["own-cgroups", "slot"])
def test_exceeding_a_limit_is_named(
    containment: Containment, tmp_path: Path, limit: str, limits: ResourceLimits, source: str, in_a_slot: bool
) -> None:
    with slots.serve(1) if in_a_slot else contextlib.nullcontext():
        run, out = contained_python(containment, tmp_path / "work", source, limits=limits)
        assert run.status == "resource-limit", (run, out)
        assert limit in run.limits_hit
        # The keeper shares the slot's cgroups with the program: the program is what the limit killed.
        assert all(slot.keeper.poll() is None for slot in slots._slots)
        # A slot is kept for the next start: what this one hit is not counted against that one.
        after, out = contained_python(containment, tmp_path / "next", "print('clean')", limits=limits)
        assert (after.status, after.limits_hit, out) == ("completed", (), "clean\n"), (after, out)


def cgroups_inside(containment: Containment, work: Path) -> dict[str, str]:
    """The pids and memory cgroups a contained program runs in, as it reads them itself."""
    _run, out = contained_python(containment, work, "print(open('/proc/self/cgroup').read())")
    return {
        line.split(":")[1]: line.split(":")[2]
        for line in out.splitlines()
        if line.split(":")[1:2] in (["pids"], ["memory"])
    }


def born_in_slot(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A file that gets, for each start that held a slot, whether its program was born in the slot's cgroups
    (written by the supervising process, a fork, as it checks): False is a start that had to be moved."""
    record = tmp_path / "born-in-slot.txt"
    checked = slots.in_slot

    def noted(pid: int, held: slots.Lease) -> bool:
        inside = checked(pid, held)
        with record.open("a") as handle:
            handle.write(f"{inside}\n")
        return inside

    monkeypatch.setattr(slots, "in_slot", noted)
    return record


def test_in_a_slot_every_start_is_born_in_the_slots_cgroups_and_nothing_is_moved(
    containment: Containment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cgroup v1 move waits for an RCU grace period (10 to 30 ms here): a served start makes and moves nothing.

    Started with its output to /dev/null too (``run_contained``'s default), which the keeper once
    refused: every such start fell back to a move, and was no faster."""
    record = born_in_slot(monkeypatch, tmp_path)
    own = [cgroups_inside(containment, tmp_path / f"own-{n}") for n in range(2)]
    assert own[0]["pids"] != own[1]["pids"]  # without slots, each start has cgroups of its own
    with slots.serve(2):
        made = [(s.pids_group.name, s.memory_group.name) for s in slots._slots]
        first, second = (cgroups_inside(containment, tmp_path / f"slot-{n}") for n in range(2))
        assert first == second and first["pids"].endswith("/" + made[0][0]) and first["memory"].endswith(made[0][1])
        held = slots.lease(10, 1 << 30)  # the first slot taken: the next start takes the second
        assert held is not None
        try:
            assert cgroups_inside(containment, tmp_path / "other")["pids"].endswith("/" + made[1][0])
        finally:
            held.release()
        work = tmp_path / "quiet"
        work.mkdir()
        quiet = run_contained(["/bin/true"], cwd=str(work), env=dict(os.environ), timeout_s=30, containment=containment)
        assert quiet.status == "completed"
        assert record.read_text().split() == ["True"] * 4
        keepers = [s.keeper for s in slots._slots]
        groups = [s.pids_group for s in slots._slots]
    assert all(k.returncode is not None for k in keepers) and not any(g.exists() for g in groups)
    assert not slots.available()


def test_a_slot_whose_keeper_died_still_contains_and_limits_its_start(
    containment: Containment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = born_in_slot(monkeypatch, tmp_path)
    with slots.serve(1):
        slot = slots._slots[0]
        slot.keeper.kill()
        slot.keeper.wait()
        inside = cgroups_inside(containment, tmp_path / "work")  # started by the supervising process, then moved
        assert inside["pids"].endswith("/" + slot.pids_group.name)
        bomb = "import os, time\nwhile True:\n    if os.fork() == 0:\n        time.sleep(30)\n        os._exit(0)"
        run, out = contained_python(containment, tmp_path / "bomb", bomb, limits=ResourceLimits(processes=20))
        assert run.status == "resource-limit" and "processes" in run.limits_hit, (run, out)
    assert record.read_text().split() == ["False"] * 2  # started by the supervising process, and moved


def test_every_process_started_inside_dies_with_the_sandbox(containment: Containment, tmp_path: Path) -> None:
    source = """
        import subprocess
        subprocess.Popen(["setsid", "env", "-i", "/bin/sh", "-c", "sleep 300"], start_new_session=True)
        print("left a daemon")
    """
    before = {p for p in os.listdir("/proc") if p.isdigit()}
    run, out = contained_python(containment, tmp_path / "work", source)
    assert run.status == "completed", out
    after = {p for p in os.listdir("/proc") if p.isdigit()} - before
    sleeping = [p for p in after if b"sleep\x00300" in _cmdline(p)]
    assert sleeping == []


def _cmdline(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@pytest.mark.parametrize("given_by", ["the call", "the containment"])
def test_a_relayed_port_reaches_the_boundarys_socket_and_nothing_else(
    containment: Containment, tmp_path: Path, given_by: str
) -> None:
    """The model boundary's seam: inside, 127.0.0.1:PORT is relayed to a host Unix socket; other ports are closed.

    The port is named by the call (``run_command(relay_ports=...)``) or by the containment in force
    (the kernel's boundary sets it for a trial, whatever the adapter).
    """
    boundary = tmp_path / "model.sock"
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(str(boundary))
    unix.listen()

    def echo_upper() -> None:
        connection, _ = unix.accept()
        request = connection.recv(100)
        connection.sendall(request.upper())
        connection.close()

    thread = threading.Thread(target=echo_upper, daemon=True)
    thread.start()
    source = """
        import socket
        s = socket.create_connection(("127.0.0.1", 8765), timeout=5)
        s.sendall(b"hello boundary")
        print(s.recv(100).decode())
        try:
            socket.create_connection(("127.0.0.1", 8766), timeout=2)
            print("8766 reached")
        except OSError:
            print("8766 closed")
    """
    relay = {8765: str(boundary)}
    if given_by == "the call":
        run, out = contained_python(containment, tmp_path / "work", source, relay_ports=relay)
    else:
        run, out = contained_python(attrs.evolve(containment, relay_ports=relay), tmp_path / "work", source)
    thread.join(timeout=5)
    unix.close()
    assert run.status == "completed", out
    assert out.split("\n")[:2] == ["HELLO BOUNDARY", "8766 closed"]


def test_a_host_loopback_port_is_reachable_inside_at_the_same_port_when_relayed(
    containment: Containment, tmp_path: Path
) -> None:
    """The model boundary on the host's 127.0.0.1:PORT, relayed in (``relay_host_ports``); unrelayed it is not."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]

    def echo_upper() -> None:
        connection, _ = server.accept()
        connection.sendall(connection.recv(100).upper())
        connection.close()

    thread = threading.Thread(target=echo_upper, daemon=True)
    thread.start()
    source = f"""
        import socket
        s = socket.create_connection(("127.0.0.1", {port}), timeout=5)
        s.sendall(b"through the relay")
        print(s.recv(100).decode())
    """
    relayed = attrs.evolve(containment, relay_host_ports=(port,))
    run, out = contained_python(relayed, tmp_path / "work", source)
    thread.join(timeout=5)
    server.close()
    assert run.status == "completed", out
    assert out.split("\n")[0] == "THROUGH THE RELAY"
    assert not list(Path(tempfile.gettempdir()).glob("certlab-relay-*"))  # released with the run


def test_a_program_that_leaves_nothing_is_reported_as_leaving_nothing(containment: Containment, tmp_path: Path) -> None:
    """bwrap ends with the program; its init (the PID namespace's) dies a moment later. Woken at once by the
    program's end, the sweep found that init still dying and named it a leftover (7 of 40 starts, measured)."""
    named = []
    for _ in range(30):
        run = run_contained(
            ["/bin/true"], cwd=str(tmp_path), env=dict(os.environ), timeout_s=30, containment=containment
        )
        assert run.status == "completed" and run.exit_code == 0, run
        named.extend(run.leftovers)
    assert named == []


def test_the_host_port_forwarder_leaves_no_thread_behind_when_closed() -> None:
    """A trial forks its graders right after the agent's run, and a fork refuses while another thread runs: a
    relayed connection's pumps, or a listener still returning from accept, once made a trial runner-broken."""
    from certlab_sandbox_bwrap.forwarder import HostPortForwarder

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def echo_once() -> None:
        connection, _ = server.accept()
        with connection:
            connection.sendall(connection.recv(100))
            connection.recv(100)  # held open until the forwarder closes it

    echo = threading.Thread(target=echo_once, daemon=True)
    echo.start()
    before = set(threading.enumerate())
    forwarder = HostPortForwarder((port,))
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(forwarder.sockets[port])
    client.sendall(b"ping")
    assert client.recv(100) == b"ping"
    forwarder.close()
    left = [t.name for t in set(threading.enumerate()) - before if t.is_alive()]
    client.close()
    server.close()
    assert left == [], f"threads of the forwarder still running after close(): {left}"


def test_a_start_in_a_slot_that_outlives_its_timeout_is_a_timeout(containment: Containment, tmp_path: Path) -> None:
    """The supervising process polls a kept program at its deadline: that poll once raised, and every timed-out
    trial of a certification was agent-unavailable."""
    work = tmp_path / "work"
    work.mkdir()
    with slots.serve(1):
        run = run_contained(
            ["/bin/sleep", "60"], cwd=str(work), env=dict(os.environ), timeout_s=1, containment=containment
        )
    assert (run.status, run.detail) == ("timeout", "timed out after 1 s"), run


def test_a_venvs_interpreter_runs_with_the_venvs_packages_and_not_the_bases(tmp_path: Path) -> None:
    """A venv's ``bin/python`` is a link to the base interpreter: the venv it is called in is the one shown."""
    import subprocess
    import sys

    from certlab_sandbox_bwrap import runtime

    venv = tmp_path / "venv"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)],
                   check=True, capture_output=True)  # fmt: skip
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "only_in_the_venv.py").write_text("WHERE = 'venv'\n")
    found = runtime.resolve(str(venv / "bin" / "python"), {"PATH": os.defpath})
    assert str(venv) in found.shown
    base = Path(os.path.realpath(venv / "bin" / "python")).parent.parent
    if not runtime.is_system(str(base)):  # a base outside the system (pyenv): its packages are covered
        assert any(c.startswith(str(base)) and c.endswith("site-packages") for c in found.covered), found
    containment = choose_containment("bwrap", [], lambda _line: None)
    work = tmp_path / "work"
    work.mkdir()
    out = work / "out.txt"
    script = "import sys, only_in_the_venv; print(sys.prefix == sys.base_prefix, only_in_the_venv.WHERE)"
    with out.open("wb") as handle:
        ran = run_contained(
            [str(venv / "bin" / "python"), "-I", "-c", script], cwd=str(work), env={"PATH": os.defpath},
            timeout_s=60, stdout=handle, stderr=handle, containment=containment,
        )  # fmt: skip
    assert ran.status == "completed" and out.read_text().split() == ["False", "venv"], out.read_text()


def test_a_script_linked_to_from_inside_a_hidden_checkout_runs_shown_alone(tmp_path: Path) -> None:
    """The demo's script agent is package data linked to the checkout's ``examples/``: the link and the file both
    lie in the hidden checkout, and the link was refused as hidden from the agent (``make demo`` failed at its
    second step wherever bwrap works). The file is shown alone, at both paths, and nothing else of the checkout."""
    from certlab_sandbox_bwrap import runtime

    checkout = tmp_path / "checkout"
    (checkout / ".git").mkdir(parents=True)
    (checkout / "answer.txt").write_text("the answer key\n")
    script = checkout / "examples" / "agent.sh"
    script.parent.mkdir()
    script.write_text(f"#!/bin/sh\necho ran\ncat {checkout / 'answer.txt'} 2>/dev/null || echo hidden\n")
    script.chmod(0o755)
    link = checkout / "package" / "examples" / "agent.sh"
    link.parent.mkdir(parents=True)
    link.symlink_to(Path("..") / ".." / "examples" / "agent.sh")
    found = runtime.resolve(str(link), {"PATH": os.defpath}, hidden=[str(checkout)])
    assert found.shown == (str(script), str(link)), found
    containment = choose_containment("bwrap", [str(checkout)], lambda _line: None)
    work = tmp_path / "work"
    work.mkdir()
    out = work / "out.txt"
    with out.open("wb") as handle:
        ran = run_contained(
            [str(link)], cwd=str(work), env={"PATH": os.defpath}, timeout_s=60, stdout=handle, stderr=handle,
            containment=containment,
        )  # fmt: skip
    assert ran.status == "completed" and out.read_text().split() == ["ran", "hidden"], (ran, out.read_text())
