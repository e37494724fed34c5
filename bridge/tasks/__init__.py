"""The task catalogue, under the tools: reading `when` into a schedule (`when.py`), making, listing and
cancelling tasks (`catalog.py`), what a webhook request must carry and which event it names
(`hooks.py`), and the prompt templates of both (`template.py`).

May import sessions (keys, authority), the store, config and the base modules; never the agent, the
gateway or bridge.jobs, which fires tasks and runs webhook events from above.
"""
