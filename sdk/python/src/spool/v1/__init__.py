"""Stubs generated from proto/spool/v1 at build time (see setup.py)."""
