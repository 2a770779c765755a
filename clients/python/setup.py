"""Builds the optional C accelerator ``smdb._speedups`` (CRC32C) where a C compiler and the
Python headers are there. ``optional=True``: when it cannot be built, the install goes on
without it and the package uses its pure-Python code (``smdb.CRC32C_IMPLEMENTATION`` says
which one is active). Everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("smdb._speedups", ["smdb/_speedups.c"], optional=True)])
