"""Shared pieces of fabriclab: errors, the scenario schema, the environment
probe and the run-state record used for cleanup."""
