"""Built-in tools: core tools and the sessions, files and web groups."""
