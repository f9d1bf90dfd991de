"""Trace outputs of a profile: Chrome JSON, Perfetto protobuf, their shared track layout, JSON encoding and trace file writing."""
