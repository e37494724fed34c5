"""MCP servers as lazily loaded tool groups: the client connections and the groups they back."""
