"""What tests share besides fixtures: rows, settings, stand-ins and the storage-request counter
with its scenarios (bench/ imports those too; fixtures live in conftest.py)."""
