"""Platform adapters: each turns platform events into Inbound and Outbound into platform calls."""
