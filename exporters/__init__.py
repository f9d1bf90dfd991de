"""exporters package."""
