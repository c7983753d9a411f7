"""models: OpenAI-compatible chat client, provider error taxonomy, the scripted model server."""
