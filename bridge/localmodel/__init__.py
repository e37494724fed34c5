"""`bridge local-model`: llama.cpp's server and a small Qwen from PyPI, installed on demand, on loopback.

`models` is the catalogue (what `--model` and `list` know), `server` installs, starts, finds and stops
the server, and `processes` tells a live server from a PID the OS has given to something else.
"""

from bridge.localmodel.models import DEFAULT_MODEL, MODELS, ModelSpec, model_named
from bridge.localmodel.processes import process_command, process_start
from bridge.localmodel.server import (
    DEFAULT_PORT,
    LocalModel,
    Mode,
    Running,
    cache_dir,
    is_local_model_url,
)

# The default model's name on the wire, for tests and the bench that run it.
MODEL_ALIAS = MODELS[DEFAULT_MODEL].alias

__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_PORT",
    "MODELS",
    "MODEL_ALIAS",
    "LocalModel",
    "Mode",
    "ModelSpec",
    "Running",
    "cache_dir",
    "is_local_model_url",
    "model_named",
    "process_command",
    "process_start",
]
