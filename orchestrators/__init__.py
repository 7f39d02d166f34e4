"""Scheduler role: the Durable Functions orchestrators that walk workflow definitions.

``blueprint`` holds ``workflow_orchestrator``, ``compensation_orchestrator`` and ``step_orchestrator``
(one step of a parallel group); the app registers it with
``app.register_blueprint(orchestrators.blueprint)``. How they work: docs/scheduler.md.
"""

from orchestrators.functions import bp as blueprint

__all__ = ["blueprint"]
