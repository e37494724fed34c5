"""`python -m bench.scale`: the scale benchmark with its own sizes (see bench/scale/__init__.py)."""

from bench.scale import main

main()
