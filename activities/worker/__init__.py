"""The agent worker (``agent_worker``: one delivery of a work message) and the agents it runs
(``handlers``)."""
