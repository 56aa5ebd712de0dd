"""Fakes for tests: a local HTTP server speaking the OpenAI and Anthropic wire formats."""
