"""Development helpers: things the tests, the demo and the benchmarks share, never used in Azure."""
