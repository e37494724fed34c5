"""The Matrix surface: one bot account on a homeserver, listening with /sync (`adapter.py`, which the
`bridge.adapters` entry point names), the /sync loop and invites (`listening.py`), room events as
Inbound (`events.py`), Markdown as Matrix HTML (`format.py`), media in and out (`media.py`) and what a
failed client-API call means (`retrying.py`). matrix-nio comes with the `matrix` extra.
"""

try:
    import nio  # noqa: F401  (only to say what is missing)
except ModuleNotFoundError as exc:  # pragma: no cover - the test extra installs it
    from bridge.errors import ConfigError

    raise ConfigError(
        "[matrix] enabled needs matrix-nio, which comes with the matrix extra: pip install 'bridge[matrix]'"
    ) from exc

from adapters.matrix.adapter import MatrixAdapter

__all__ = ["MatrixAdapter"]
