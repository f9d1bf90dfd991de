"""monitor package."""
