"""Bridge: a self-hosted messaging bridge bot with durable sessions and on-demand tool groups."""

__version__ = "0.1.0"
