"""The layer graph: parts and blocks with their per-token terms, the one layer layout, and the graph's totals."""
