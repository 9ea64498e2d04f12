"""Optional settings: a module attribute the entry reads with a default (none set here)."""
