"""Model providers behind one narrow seam (`base.Provider`): OpenAI-compatible servers (`openai.py`)
and Anthropic (`anthropic.py`), built by `factory.py`, one per profile (`profiles.py`). `http.py` is
what they share (retries, errors, no leaked secret), on an aiohttp transport (`transport.py`) and
server-sent events (`sse.py`); `textmode/` and `textprompt.py` are the text tool-call protocol;
`holdback.py` keeps a call being written out of what streams to a chat.

May import config, logs, metrics and the base modules; knows nothing of the store (a contract says so)
or of sessions, tools or the agent.
"""
