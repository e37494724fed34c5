"""Tools, tool groups and the registry that decides which schemas the model sees."""
