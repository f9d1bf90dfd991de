"""The profile itself: the in-memory Profile, the builder that fills it, and its file format."""
