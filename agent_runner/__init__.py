"""``sas-agent``: the app's agent worker (``activities.worker``) outside the Function App, with a
receive loop of its own in place of the host's queue trigger (docs/agents.md, "Run an agent outside
the Function App")."""
