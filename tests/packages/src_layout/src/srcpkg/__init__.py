"""Sample src/-layout project: entries in a subpackage call helpers of another module."""
