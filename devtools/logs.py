"""Console logging for the demo commands: errors only.

The app's custom events (``sas.events``) log at INFO on their own logger so that the Azure Monitor
exporter picks them up; on a terminal they would bury the demo's own output, so the terminal handler
passes errors only, whatever level a logger is set to.
"""

from __future__ import annotations

import logging


def quiet_logging() -> None:
    """Print ERROR and worse to stderr, one line each; nothing below."""
    handler = logging.StreamHandler()
    handler.setLevel(logging.ERROR)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.ERROR, handlers=[handler])
