"""Sample project whose entry reads a tensor the build cannot lift: an object attribute."""
