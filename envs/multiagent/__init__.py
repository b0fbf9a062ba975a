"""Multi-agent text games (PettingZoo AEC and Parallel)."""
