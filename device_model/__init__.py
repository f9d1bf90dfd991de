"""device_model package."""
