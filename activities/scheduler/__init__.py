"""The scheduler's bookkeeping activities: what the orchestrators call (``functions``)."""
