"""Developer scripts (benchmarks). Not part of the installed package."""
