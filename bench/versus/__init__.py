"""Bridge against nanobot 0.3.5 on the same workload (`python -m bench nanobot`).

Each side is a process of its own with the same closed loop (`loop.py`) of chats, each turn one tool
call then a reply from the instant model, which runs in a third process; the two take turns, round by
round. nanobot lives in its own environment (`.ci/run` makes it), so its dependencies stay out of
Bridge's.
"""
