"""agent: the reference tool-calling agent."""
