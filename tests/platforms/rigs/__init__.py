"""One `PlatformRig` per platform (tests/platforms/rig.py), each on its platform's fake."""
