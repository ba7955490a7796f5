"""The package version, in its own module so that lower layers (tracing names its tracer with it)
need not import the package root, whose lazy exports reach every layer."""

__version__ = "0.1.0"
