"""The exec group: commands run in bubblewrap, and every way out of it is refused or contained.

Each escape test tries what a hostile member could ask the model to do and ends on what the host sees.
`.ci/run` installs bubblewrap and sets BRIDGE_REQUIRE_BWRAP, so there these tests must run; elsewhere
they are skipped only when bwrap is not installed. A bwrap that is there but cannot make a sandbox
(user namespaces off) fails them, with the reason.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from bridge.config import Settings
from bridge.tools.base import Tool, ToolContext, ToolResult
from bridge.tools.builtin.exec import exec_group, sandbox_problem
from bridge.tools.builtin.exec.output import FLOOD_FACTOR, FLOOD_MIN_BYTES
from tests.system import require_bwrap
from tests.tools.conftest import context_of

# Seconds a test gives the host to show what it waits for (a process gone); never a fixed sleep.
WITHIN_S = 5.0


@pytest.fixture(scope="module", autouse=True)
def bwrap_installed() -> None:
    require_bwrap()


@dataclass
class Exec:
    """The exec tools of one Settings, and the places a test looks at from the host."""

    settings: Settings
    ctx: ToolContext
    workspace: Path
    private: Path

    @property
    def tools(self) -> dict[str, Tool]:
        return {tool.name: tool for tool in exec_group(self.settings.tools.exec).tools}

    async def command(self, command: str, **args: Any) -> ToolResult:
        return await self.tools["run_command"]({"command": command, **args}, self.ctx)

    async def python(self, code: str) -> ToolResult:
        return await self.tools["run_python"]({"code": code}, self.ctx)


MakeExec = Callable[..., Exec]


@pytest.fixture
def make_exec(tmp_path: Path) -> MakeExec:
    """Exec tools whose [tools.exec] is enabled and overridden by keyword arguments. Bridge's database
    and config are real files in tmp_path/private, beside (not in) the workspace."""
    private = tmp_path / "private"
    private.mkdir()
    (private / "bridge.db").write_text("db-secret-7f3a")
    (private / "config.toml").write_text('[telegram]\ntoken = "cfg-secret-91bc"\n')

    def make(storage: Path | None = None, **exec_settings: Any) -> Exec:
        exec_settings.setdefault("enabled", True)
        workspace = tmp_path / "workspace"
        settings = Settings(
            storage={"path": storage or private / "bridge.db"},
            tools={"workspace": workspace, "exec": exec_settings},
        )
        return Exec(settings, context_of(settings), workspace, private)

    return make


@pytest.fixture
def sandbox(make_exec: MakeExec) -> Exec:
    return make_exec(max_timeout_s=20)


def ran(result: ToolResult) -> dict[str, Any]:
    assert result.ok, result.content
    data: dict[str, Any] = json.loads(result.content)
    return data


def processes_with(marker: str) -> list[int]:
    """Host processes whose command line holds `marker` (a /proc scan: no psutil)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            cmdline = Path(entry.path, "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry.name))
    return found


def host_has(path: str) -> bool:
    # lexists: a link counts too; False where the host's own permissions hide the path (/root for a
    # test run as a normal user), where the sandbox, started by that user, could not write either.
    return os.path.lexists(path)


def host_reads(path: str) -> str:
    return Path(path).read_text()


def sleep_marker() -> str:
    """Digits to mark a sleep with (`sleep 86400.<digits>` is a valid duration), to find it in /proc."""
    return str(uuid.uuid4().int)[:12]


async def eventually(check: Callable[[], bool], within: float = WITHIN_S) -> bool:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


# --- what works --------------------------------------------------------------------------------


async def test_a_command_runs_in_the_workspace_and_its_files_reach_the_host(sandbox: Exec) -> None:
    data = ran(await sandbox.command("pwd; echo made inside > out.txt; echo to stderr >&2; exit 3"))
    assert data["exit_code"] == 3
    assert data["stdout"] == "/workspace\n"
    assert data["stderr"] == "to stderr\n"
    assert (sandbox.workspace / "out.txt").read_text() == "made inside\n"


async def test_run_python_runs_code_in_the_workspace(sandbox: Exec) -> None:
    sandbox.workspace.mkdir()
    (sandbox.workspace / "numbers.txt").write_text("1 2 3\n")
    code = "import os\nprint(sum(map(int, open('numbers.txt').read().split())), os.getcwd())"
    assert ran(await sandbox.python(code))["stdout"] == "6 /workspace\n"


async def test_a_failing_command_is_a_result_with_its_exit_code_and_a_plain_summary(sandbox: Exec) -> None:
    result = await sandbox.command("echo nope >&2; exit 7")
    assert ran(result)["exit_code"] == 7
    plain = sandbox.tools["run_command"].plain
    assert plain is not None
    assert plain(result.content) == "The command failed with exit code 7; it printed:\nnope"


async def test_a_command_killed_by_a_signal_names_the_signal(sandbox: Exec) -> None:
    data = ran(await sandbox.command("kill -KILL $$"))
    assert (data["exit_code"], data["signal"]) == (137, "SIGKILL")


# --- escapes: files ----------------------------------------------------------------------------


async def test_writing_outside_the_workspace_is_refused_and_the_host_is_untouched(
    sandbox: Exec, tmp_path: Path
) -> None:
    marker = f"bridge-escape-{uuid.uuid4().hex}"
    host_file = tmp_path / "outside.txt"
    targets = [f"/etc/{marker}", f"/usr/{marker}", f"/{marker}", str(host_file), f"/root/{marker}"]
    script = "; ".join(f"echo pwned > {target}" for target in targets)
    # /tmp is the sandbox's own: writable, and gone with it.
    data = ran(await sandbox.command(f"{script}; echo private > /tmp/{marker} && echo tmp-ok"))
    assert data["stdout"] == "tmp-ok\n"
    assert data["stderr"].count("Read-only file system") + data["stderr"].count("Directory nonexistent") >= 4
    for target in [*targets, f"/tmp/{marker}"]:
        assert not host_has(target), target


async def test_the_hosts_kernel_settings_cannot_be_changed(sandbox: Exec) -> None:
    # Rewrites a sysctl with the value it has, so a write that got through would change nothing; under
    # root, without the read-only cover, it does get through (see places.proc_covers).
    setting = "/proc/sys/kernel/printk_ratelimit"
    before = host_reads(setting)
    data = ran(await sandbox.command(f"cat {setting} > /tmp/v && cat /tmp/v > {setting} && echo changed"))
    assert "changed" not in data["stdout"]
    assert "Read-only file system" in data["stderr"]
    assert host_reads(setting) == before
    writable = ran(
        await sandbox.command(
            "for f in /proc/sysrq-trigger /proc/sys/kernel/core_pattern; do test -w $f && echo $f; done; true"
        )
    )
    assert writable["stdout"] == ""


async def test_a_set_uid_program_left_in_the_workspace_loses_its_bit(sandbox: Exec) -> None:
    data = ran(await sandbox.command("cp /bin/true suid && chmod 6755 suid && ls -l suid"))
    assert data["stdout"].startswith("-rwsr-sr-x")
    mode = (sandbox.workspace / "suid").stat().st_mode
    assert mode & 0o7777 == 0o755


async def test_bridges_config_and_database_are_not_visible(sandbox: Exec) -> None:
    private = sandbox.private
    command = (
        f"cat {private}/bridge.db {private}/config.toml; ls {private} {private.parent}; "
        "ls -a / /tmp /home /root; grep -rs secret /etc /tmp /workspace /proc/1/environ; true"
    )
    data = ran(await sandbox.command(command))
    said = data["stdout"] + data["stderr"]
    assert "db-secret" not in said and "cfg-secret" not in said
    assert f"{private}/bridge.db: No such file or directory" in said
    # The root holds only what the sandbox was given: no home, no host /tmp, no checkout.
    assert "home" not in data["stdout"].split() and "root" not in data["stdout"].split()


async def test_a_symlink_out_of_the_workspace_leads_nowhere(sandbox: Exec) -> None:
    sandbox.workspace.mkdir()
    (sandbox.workspace / "config-link").symlink_to(sandbox.private / "config.toml")
    (sandbox.workspace / "private-link").symlink_to(sandbox.private)
    data = ran(await sandbox.command("cat config-link; ls private-link/; cat private-link/bridge.db"))
    said = data["stdout"] + data["stderr"]
    assert "cfg-secret" not in said and "db-secret" not in said
    assert data["stdout"] == ""
    assert "No such file or directory" in data["stderr"]


async def test_a_workspace_that_holds_the_database_is_refused(make_exec: MakeExec, tmp_path: Path) -> None:
    inside = make_exec(storage=tmp_path / "workspace" / "bridge.db")
    result = await inside.command("echo ran > ran.txt")
    assert result.code == "unsafe_workspace"
    assert "holds Bridge's own files" in result.content
    assert not (inside.workspace / "ran.txt").exists()


async def test_host_environment_secrets_are_not_passed_in(
    sandbox: Exec, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BRIDGE_TELEGRAM__TOKEN", "env-secret-5d2e")
    monkeypatch.setenv("OPENAI_API_KEY", "env-secret-5d2e")
    data = ran(await sandbox.command("env; cat /proc/self/environ /proc/1/environ"))
    said = data["stdout"] + data["stderr"]
    assert "env-secret" not in said and "BRIDGE_" not in said
    names = {line.split("=", 1)[0] for line in data["stdout"].splitlines() if "=" in line}
    assert {"PATH", "HOME", "LANG"} <= names
    assert "HOME=/workspace" in data["stdout"]


# --- escapes: network --------------------------------------------------------------------------


@pytest.fixture
async def host_server() -> AsyncIterator[tuple[int, list[str]]]:
    """An HTTP server on the host's 127.0.0.1 (where Bridge's admin API would be), and its hits."""
    hits: list[str] = []

    async def secret(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(text="host-only-answer")

    app = web.Application()
    app.router.add_get("/secret", secret)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port: int = runner.addresses[0][1]
    try:
        yield port, hits
    finally:
        await runner.cleanup()


FETCH = """
import urllib.request
try:
    print(urllib.request.urlopen("http://127.0.0.1:{port}/secret", timeout=5).read().decode())
except OSError as exc:
    print("refused:", exc)
"""


async def test_the_network_is_unreachable_by_default(
    sandbox: Exec, host_server: tuple[int, list[str]]
) -> None:
    port, hits = host_server
    data = ran(await sandbox.python(FETCH.format(port=port)))
    assert data["stdout"].startswith("refused:")
    assert "host-only-answer" not in data["stdout"]
    assert hits == []
    # Only a loopback of its own: no interface leads anywhere.
    links = ran(await sandbox.command("cat /proc/net/dev"))["stdout"]
    assert [line.split(":")[0].strip() for line in links.splitlines()[2:]] == ["lo"]


async def test_allow_network_shares_the_hosts_network_loopback_included(
    make_exec: MakeExec, host_server: tuple[int, list[str]]
) -> None:
    # Documented in docs/tools.md: with allow_network the sandbox reaches what the host reaches, its
    # 127.0.0.1 too; the web tools' private-address guard does not apply to it.
    port, hits = host_server
    data = ran(await make_exec(allow_network=True, max_timeout_s=20).python(FETCH.format(port=port)))
    assert data["stdout"] == "host-only-answer\n"
    assert hits == ["/secret"]


# --- containment: time, processes, memory, output ----------------------------------------------


async def test_a_command_that_sleeps_forever_is_killed_at_its_timeout_with_everything_it_started(
    sandbox: Exec,
) -> None:
    marker = sleep_marker()
    started = time.monotonic()
    forever = f"sleep 86400.{marker}"
    result = await sandbox.command(f"{forever} & setsid {forever} & echo started; {forever}", timeout_s=1)
    assert time.monotonic() - started < 1 + WITHIN_S
    assert result.code == "timeout"
    assert "after 1 s (the limit)" in result.content
    assert '"stdout": "started\\n"' in result.content
    assert await eventually(lambda: not processes_with(marker)), processes_with(marker)


async def test_a_daemon_left_behind_does_not_outlive_its_call(sandbox: Exec) -> None:
    marker = sleep_marker()
    # Detached twice over, output closed: it would outlive a plain process-group kill.
    data = ran(await sandbox.command(f"(setsid sleep 86400.{marker} >/dev/null 2>&1 &); echo left"))
    assert data["stdout"] == "left\n"
    assert await eventually(lambda: not processes_with(marker)), processes_with(marker)


async def test_a_call_cancelled_from_outside_leaves_no_process(sandbox: Exec) -> None:
    # What the agent's own tool timeout, /clear or a shutdown does to a call in flight.
    marker = sleep_marker()
    call = asyncio.ensure_future(sandbox.command(f"sleep 86400.{marker}"))
    assert await eventually(lambda: bool(processes_with(marker)))
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert await eventually(lambda: not processes_with(marker)), processes_with(marker)


async def test_a_timeout_above_the_limit_is_held_to_the_limit(make_exec: MakeExec) -> None:
    result = await make_exec(max_timeout_s=1).command("sleep 30", timeout_s=600)
    assert result.code == "timeout"
    assert "after 1 s (the limit)" in result.content


async def test_a_fork_bomb_is_contained_and_the_call_returns(make_exec: MakeExec) -> None:
    cap = 16
    limited = make_exec(max_processes=cap, max_timeout_s=20)
    marker = sleep_marker()
    peak = 0

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, len(processes_with(marker)))
            await asyncio.sleep(0.01)

    # Each shell leaves a sleeper behind and starts two more shells: the sleepers are a population the
    # host can count (the shells churn too fast to). The bomb goes off in a subshell, which dies at the
    # first refused fork; the call's own shell then becomes a sleeper (exec: no fork) until the timeout.
    forever = f"sleep 86400.{marker}"
    bomb = f"bomb() {{ {forever} & bomb & bomb; }}; (bomb); exec {forever}"
    watcher = asyncio.create_task(watch())
    try:
        started = time.monotonic()
        result = await limited.command(bomb, timeout_s=3)
    finally:
        watcher.cancel()
    assert time.monotonic() - started < 3 + WITHIN_S
    assert result.code == "timeout"
    assert "Cannot fork" in result.content
    # Counted from the host: the bomb grew to the cap (plus bwrap outside and its init inside, whose
    # command lines hold the marker too) and no further.
    assert cap // 2 <= peak <= cap + 2
    assert await eventually(lambda: not processes_with(marker)), processes_with(marker)
    # The host still starts processes.
    host = await asyncio.create_subprocess_exec("true")
    assert await asyncio.wait_for(host.wait(), WITHIN_S) == 0


async def test_memory_past_the_cap_is_refused(make_exec: MakeExec) -> None:
    limited = make_exec(max_memory_mb=64, max_timeout_s=20)
    data = ran(await limited.python("b = bytearray(256 * 1024 * 1024)\nprint('allocated')"))
    assert data["stdout"] == ""
    assert "MemoryError" in data["stderr"]
    assert data["exit_code"] == 1


async def test_tmp_is_capped_like_memory(make_exec: MakeExec) -> None:
    limited = make_exec(max_memory_mb=32, max_timeout_s=20)
    data = ran(await limited.command("head -c 100000000 /dev/zero > /tmp/fill"))
    assert data["exit_code"] != 0
    assert "No space left on device" in data["stderr"]


async def test_long_output_is_cut_at_the_cap_and_the_cut_is_counted(make_exec: MakeExec) -> None:
    capped = make_exec(max_output_chars=1000, max_timeout_s=20)
    data = ran(await capped.command("seq 1 20000"))
    full = "".join(f"{n}\n" for n in range(1, 20001))
    assert data["stdout"] == full[:1000]
    assert data["stdout_cut_chars"] == len(full) - 1000
    assert "stderr_cut_chars" not in data


async def test_an_output_flood_is_stopped_promptly(sandbox: Exec) -> None:
    started = time.monotonic()
    result = await sandbox.command("yes flood")
    assert time.monotonic() - started < WITHIN_S
    assert result.code == "output_limit"
    report = json.loads(result.content.split("Output so far: ", 1)[1])
    assert len(report["stdout"]) == 20_000
    assert report["stdout_cut_chars"] >= max(FLOOD_MIN_BYTES, FLOOD_FACTOR * 20_000) - 20_000


# --- failing closed ----------------------------------------------------------------------------


async def test_without_bwrap_every_call_is_refused_and_the_problem_is_named(make_exec: MakeExec) -> None:
    missing = make_exec(bwrap="/nonexistent/bwrap")
    problem = sandbox_problem(missing.settings.tools.exec)
    assert problem is not None and "'/nonexistent/bwrap' was not found" in problem
    for result in (await missing.command("echo ran > ran.txt"), await missing.python("open('ran.txt', 'w')")):
        assert result.code == "sandbox_unavailable"
        assert "bubblewrap is not installed" in result.content
    assert not (missing.workspace / "ran.txt").exists()


async def test_a_bwrap_that_cannot_make_a_sandbox_is_refused_with_its_words(
    make_exec: MakeExec, tmp_path: Path
) -> None:
    # A stand-in for bwrap where user namespaces are off: it knows every option and sets up nothing.
    real = shutil.which("bwrap")
    assert real is not None
    fake = tmp_path / "bwrap"
    fake.write_text(
        f'#!/bin/sh\nif [ "$1" = --help ]; then exec {real} --help; fi\n'
        'echo "bwrap: No permissions to create new namespace" >&2\nexit 1\n'
    )
    fake.chmod(0o755)
    broken = make_exec(bwrap=str(fake))
    problem = sandbox_problem(broken.settings.tools.exec)
    assert problem is not None
    assert "could not make a sandbox: bwrap: No permissions to create new namespace" in problem
    assert "user namespaces" in problem
    assert (await broken.command("true")).code == "sandbox_unavailable"


def test_the_sandbox_works_here(sandbox: Exec) -> None:
    assert sandbox_problem(sandbox.settings.tools.exec) is None
