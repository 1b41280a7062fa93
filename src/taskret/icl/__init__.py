"""In-context learning: prompt assembly, inference and its evaluation."""
