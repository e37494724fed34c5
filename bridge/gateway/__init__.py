"""The gateway: commands, session lanes and delivery between adapters and the agent."""
