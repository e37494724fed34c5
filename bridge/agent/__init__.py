"""The agent run loop: history, restored tool groups, tool calls, the final reply."""
