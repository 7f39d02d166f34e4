"""The one Durable Functions blueprint every function of the Agent role is registered on.

Kept in its own module so ``scheduling``, ``worker``, ``results`` and ``dead_letters`` can each add
their functions to it without importing one another; ``activities.blueprint`` re-exports it.
"""

from __future__ import annotations

import azure.durable_functions as df

bp = df.Blueprint()
