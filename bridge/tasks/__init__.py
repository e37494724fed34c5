"""Scheduled tasks: when they fire, and (as issue 18 lands) how they are stored, run and delivered."""
