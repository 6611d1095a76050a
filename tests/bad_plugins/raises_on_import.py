"""A plug-in that fails while it is imported (line 6)."""

LICENCE_SERVER = None

if LICENCE_SERVER is None:
    raise RuntimeError("no licence server configured\nsecond line that must not reach the user")
