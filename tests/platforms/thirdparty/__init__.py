"""The conformance suite's example third-party plugin: the Relay adapter, its fake service, the
entry point that registers it, and the process that runs it."""
