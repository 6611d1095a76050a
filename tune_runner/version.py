"""tune-rl's version, in a module of its own: the modules that print it need not import the package's front
door (tune_runner/__init__.py), which loads the Python API on first use."""

__version__ = "0.1.0"
