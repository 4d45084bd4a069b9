import importlib.util
import os
import shutil
import tempfile

import pytest

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")


@pytest.fixture
def bench_script():
    """load(name): benchmarks/<name>.py as a module (the benchmark scripts are not a package);
    a name with a folder (lab/<name>) is taken from the repository root."""

    def load(name):
        folder = os.path.dirname(BENCHMARKS) if "/" in name else BENCHMARKS
        path = os.path.join(folder, f"{name}.py")
        spec = importlib.util.spec_from_file_location(os.path.basename(name), path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


class SessionSetups:
    """Set-ups that several test modules read and none changes, made once a run instead of once per
    module (a module fixture imported into another module is set up again there)."""

    def __init__(self):
        self._made = {}

    def get(self, name, make):
        if name not in self._made:
            self._made[name] = make()
        return self._made[name]


@pytest.fixture(scope="session")
def session_setups():
    """get(name, make): make() the first time a run asks for `name`, its result after that."""
    return SessionSetups()


def pytest_configure(config):
    """Every test run gets its own warpforge cache (compile cache, baselines), as CI's fresh
    machine does: a warm ~/.cache/warpforge would hide what a clean run costs and let a test pass
    on something an earlier run left there. WARPFORGE_TEST_CACHE=DIR uses DIR instead (kept)."""
    kept = os.environ.get("WARPFORGE_TEST_CACHE")
    cache = kept or tempfile.mkdtemp(prefix="warpforge-test-cache-")
    config._warpforge_cache = None if kept else cache
    os.environ["WARPFORGE_CACHE"] = cache


def pytest_unconfigure(config):
    cache = getattr(config, "_warpforge_cache", None)
    if cache:
        shutil.rmtree(cache, ignore_errors=True)


def pytest_terminal_summary(terminalreporter):
    """What a test asked to show at the end of the run, with record_property("summary", text): the
    source's total against its line budget (test_structure.py)."""
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) == "call":
                for name, value in getattr(report, "user_properties", ()):
                    if name == "summary":
                        terminalreporter.write_line(str(value))


def pytest_collection_modifyitems(config, items):
    """GPU tests are skipped without CUDA: they must never pass silently on a CPU machine."""
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def wait_until_listening(server, port: int, seconds: float = 60.0) -> None:
    """Block until a server process started by a test accepts connections on 127.0.0.1:`port`
    (a hang guard, not a speed claim: it fails only if the server exits or never listens)."""
    import socket
    import time

    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert server.poll() is None and time.monotonic() < deadline, "the HTTP server did not start"
            time.sleep(0.2)
