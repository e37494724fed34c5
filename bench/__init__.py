"""Benchmarks that print figures; they are not tests (run them all with `python -m bench`)."""
