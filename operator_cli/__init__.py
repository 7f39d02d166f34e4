"""The operator CLI: a tool that composes the supervisor's operator intents, so it sits above the roles."""
