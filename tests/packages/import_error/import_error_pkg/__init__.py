"""Sample project with a module that cannot be imported at build time."""
