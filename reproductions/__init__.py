"""Paper reproductions: one folder per paper (drivers, published numbers, presets, results)."""
