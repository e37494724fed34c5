"""The one HTTP server of `bridge run`: admin API and dashboard, /healthz, /readyz, /metrics."""
