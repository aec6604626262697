"""The dpbench dashboard: asv results + run files → a static plotly site, and commit comparison."""
