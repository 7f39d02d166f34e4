"""``sas-agent``: the app's agent worker run outside the Function App, for one or more agent pools.

A tool, like ``operator_cli``: it composes the worker role (``activities.worker``) with a receive loop
of its own in place of the Functions host's queue trigger (``agent_runner.runner``) and a command line
(``agent_runner.cli``). docs/agents.md, "Run an agent outside the Function App", says how to run it.
"""
