"""Servers on 127.0.0.1 that the real client libraries talk to, shared by the tests and the benchmarks:
the OpenAI-compatible model (`openai_server.py`, with `scripted_model.py`), the Telegram Bot API
(`telegram_api.py`), an MCP server run as a real process (`mcp_server.py`, `python -m
devkit.fakes.mcp_server`), and what they are built on (`loopback.py`). The fakes only the tests use
(Discord, Anthropic, the agent-to-agent model) stay in tests/fakes.
"""
