"""Entries exercising every call-signature feature of aot-build."""
