"""The random-kill soak test: `bridge run` against the fakes, killed at random, checked at the end."""
