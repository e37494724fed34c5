"""Session keys and the session service: one active session per key."""
