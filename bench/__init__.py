"""jobq's benchmarks: ``python -m bench NAME [options]`` (see docs/PERFORMANCE.md).

Each bench prints one JSON line per result as it goes, then a readable table.
"""
