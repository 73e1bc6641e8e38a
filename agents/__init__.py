"""Agent profiles (one TOML per real agent), the reference agent, and the replay agent."""
