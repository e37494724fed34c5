"""Attachments after they arrive: screened at intake and read by the run that answers them
(`intake.py`), kept by content (`blobs.py`), read with a limit (`bounded.py`), transcribed (`stt.py`)
and shown to vision models (`parts.py`); and answers spoken back (`speech.py`). What an attachment
is (`Attachment`, `OutFile`) is bridge.events' vocabulary, which adapters share.

May import llm, sessions, the store, config and the base modules.
"""
