"""Traffic agents (one process per Mininet host) and pure traffic patterns."""
