"""The native aten recorder: its C++ source and the code that builds and loads it for the installed torch."""
