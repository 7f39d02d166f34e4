"""What agents send back: the result handler and the dead-letter handler."""
