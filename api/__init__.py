"""HTTP starter, status and operator API: :data:`blueprint` is what ``function_app.py`` registers.

The plain ``async (req, client, services)`` bodies live in :mod:`api.handlers`, :mod:`api.start` and
:mod:`api.operator_api`, so tests and the in-process durable test host can call them directly.
"""

from api.functions import blueprint

__all__ = ["blueprint"]
