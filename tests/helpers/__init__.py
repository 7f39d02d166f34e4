"""What tests share besides fixtures: rows, settings and stand-ins (fixtures live in conftest.py)."""
