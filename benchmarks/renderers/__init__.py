"""The benchmark report's renderers, one module per family of results files (benchmarks/report.py puts them on
the README and the benchmark page); :mod:`.common` holds what they share, :mod:`.paths` where moved scripts live now."""
