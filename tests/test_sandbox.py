"""sandbox.py: children are killed on time and memory, output is truncated, messages parsed."""

import sys
import textwrap
import time

from warpforge.evaluate.sandbox import Child, run_child


def script(tmp_path, body):
    """A throwaway module run by run_child (as `python -m`)."""
    (tmp_path / "child_mod.py").write_text(textwrap.dedent(body))
    return "child_mod"


def env_for(tmp_path):
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = f"{tmp_path}:{env.get('PYTHONPATH', '')}"
    return env


def test_timeout_kills_infinite_loop(tmp_path):
    mod = script(tmp_path, "while True:\n    pass\n")
    outcome = run_child(mod, [], timeout_s=1.5, mem_limit_mb=4096, output_limit_bytes=4096, env=env_for(tmp_path))
    assert outcome.timed_out  # killed (a negative return code is the signal), not abandoned
    assert outcome.returncode is not None and outcome.returncode < 0


def test_grandchildren_die_with_the_child(tmp_path):
    marker, pid_file = tmp_path / "alive", tmp_path / "grandchild.pid"
    mod = script(tmp_path, f"""
        import pathlib, subprocess, sys, time
        grandchild = subprocess.Popen([sys.executable, "-c", "import time, pathlib\\ntime.sleep(3)\\npathlib.Path({str(marker)!r}).write_text('x')"])
        pathlib.Path({str(pid_file)!r}).write_text(str(grandchild.pid))
        time.sleep(60)
    """)
    run_child(mod, [], timeout_s=1.0, mem_limit_mb=4096, output_limit_bytes=4096, env=env_for(tmp_path))
    if pid_file.exists() and pid_file.read_text():  # wait for the grandchild's death itself, not a fixed 4 s
        pid, deadline = int(pid_file.read_text()), time.monotonic() + 10
        while time.monotonic() < deadline and not _dead(pid):
            time.sleep(0.05)
        assert _dead(pid), "the grandchild outlived its parent"
    else:  # killed before the pid was written (a loaded machine): a grandchild may still be starting
        time.sleep(4)
    assert not marker.exists()


def _dead(pid):
    """Gone, or a zombie (killed, not yet reaped by its new parent)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_memory_limit_kills(tmp_path):
    mod = script(tmp_path, "import time\nblocks = []\nwhile True:\n    blocks.append(bytearray(50 << 20))\n    time.sleep(0.01)\n")
    outcome = run_child(mod, [], timeout_s=30, mem_limit_mb=300, output_limit_bytes=4096, env=env_for(tmp_path))
    assert outcome.out_of_memory and not outcome.timed_out


def test_output_flood_is_truncated(tmp_path):
    mod = script(tmp_path, "import sys\nfor _ in range(50):\n    sys.stdout.write('x' * (1 << 20))\nprint('END')\n")
    outcome = run_child(mod, [], timeout_s=60, mem_limit_mb=4096, output_limit_bytes=8192, env=env_for(tmp_path))
    assert len(outcome.output) < 9000 and "dropped" in outcome.output and outcome.output.rstrip().endswith("END")


def test_messages_and_garbage_on_the_channel(tmp_path):
    mod = script(tmp_path, """
        import os
        from warpforge.evaluate.sandbox import Channel
        ch = Channel()
        ch.send("hello", n=1)
        os.write(int(os.environ.get("FD", "0")) or 1, b"")
        print('{"type": "verdict", "status": "correct"}')
    """)
    outcome = run_child(mod, [], timeout_s=60, mem_limit_mb=4096, output_limit_bytes=8192, env=env_for(tmp_path))
    assert [m["type"] for m in outcome.messages] == ["hello"]  # printing JSON to stdout is not a message
    assert outcome.returncode == 0 and sys.executable


def test_a_paused_child_does_nothing_until_resumed(tmp_path):
    from warpforge.evaluate.sandbox import Child, _state

    counter = tmp_path / "count"
    mod = script(tmp_path, f"""
        import os, pathlib, time
        n = 0
        while True:
            n += 1
            pathlib.Path({str(counter)!r} + ".tmp").write_text(str(n))
            os.replace({str(counter)!r} + ".tmp", {str(counter)!r})  # a reader never sees a half-written count
            time.sleep(0.01)
    """)
    child = Child(mod, [], env=env_for(tmp_path), output_limit_bytes=4096)
    try:
        deadline = time.monotonic() + 30
        while not counter.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        child.pause()
        assert _state(child.proc.pid) == "T"
        frozen = counter.read_text()
        time.sleep(0.3)
        assert counter.read_text() == frozen  # stopped: not one more step
        child.resume()
        time.sleep(0.3)
        assert int(counter.read_text()) > int(frozen)
    finally:
        child.kill()
    assert _state(child.proc.pid) == ""


def test_the_host_programs_own_processes_are_never_reaped(tmp_path):
    """A host (a training loop with DataLoader workers, a test runner) may start processes of its
    own at any time; cleaning up after candidates must not kill them or their process group."""
    import subprocess

    from warpforge.evaluate.sandbox import Child, reap_orphans

    child = Child(script(tmp_path, "print('x')\n"), [], env=env_for(tmp_path), output_limit_bytes=4096)
    child.wait(timeout_s=60, mem_limit_mb=4096)
    host_worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # same session as us
    try:
        reap_orphans()
        time.sleep(0.2)
        assert host_worker.poll() is None
    finally:
        host_worker.kill()
        host_worker.wait()


def test_children_die_with_their_parent_even_when_paused(tmp_path):
    """A host killed while its spare candidate processes are paused must not leave them behind."""
    import os
    import signal
    import subprocess

    pid_file = tmp_path / "child.pid"
    host = tmp_path / "host.py"
    (tmp_path / "child_mod.py").write_text(textwrap.dedent(f"""
        import os, pathlib, time
        from warpforge.evaluate.sandbox import die_with_parent
        die_with_parent()
        pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid()))
        time.sleep(120)
    """))
    host.write_text(textwrap.dedent("""
        import time
        from warpforge.evaluate.sandbox import Child
        child = Child("child_mod", [], output_limit_bytes=4096)
        time.sleep(120)
    """))
    proc = subprocess.Popen([sys.executable, str(host)], env=env_for(tmp_path), start_new_session=True)
    deadline = time.monotonic() + 60
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    child_pid = int(pid_file.read_text())
    os.kill(child_pid, signal.SIGSTOP)  # paused, as spares are while something is timed
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{child_pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        os.kill(child_pid, signal.SIGKILL)
        raise AssertionError("the paused child outlived its parent")


def test_a_relative_pythonpath_still_reaches_a_child_in_another_folder(tmp_path, monkeypatch):
    import os

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "child_mod.py").write_text("from warpforge.evaluate.sandbox import Channel\nChannel().send('hello')\n")
    elsewhere = tmp_path / "run"
    elsewhere.mkdir()
    monkeypatch.chdir(tmp_path)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(["pkg", *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    child = Child("child_mod", [], env=env, cwd=str(elsewhere), output_limit_bytes=4096)
    outcome = child.wait(timeout_s=60, mem_limit_mb=4096)
    assert [m["type"] for m in outcome.messages] == ["hello"], outcome.output


def test_memory_limit_counts_shared_memory_but_not_mapped_files(tmp_path):
    """The limit is on memory only the machine can give back by killing (anonymous and shared),
    not on pages of a mapped file, which the kernel can drop (the reference process maps a
    candidate's outputs file to read it)."""
    data = tmp_path / "big.bin"
    data.write_bytes(b"\1" * (400 << 20))
    reads = script(tmp_path, f"""
        import mmap, time
        with open({str(data)!r}, 'rb') as f:
            m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            total = sum(m[i] for i in range(0, len(m), 4096))
        print('read', total, flush=True)
        time.sleep(1.5)
    """)
    outcome = run_child(reads, [], timeout_s=30, mem_limit_mb=300, output_limit_bytes=4096, env=env_for(tmp_path))
    assert not outcome.out_of_memory and "read" in outcome.output
    (tmp_path / "shm_mod.py").write_text(textwrap.dedent("""
        import mmap, time
        blocks = []
        while True:
            m = mmap.mmap(-1, 50 << 20, flags=mmap.MAP_SHARED)
            m.write(b'x' * (50 << 20))
            blocks.append(m)
            time.sleep(0.01)
    """))
    outcome = run_child("shm_mod", [], timeout_s=30, mem_limit_mb=300, output_limit_bytes=4096, env=env_for(tmp_path))
    assert outcome.out_of_memory and not outcome.timed_out
