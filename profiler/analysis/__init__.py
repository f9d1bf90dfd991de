"""Reading a profile: summaries, per-rank views, diffs, advice and text/JSON rendering."""
