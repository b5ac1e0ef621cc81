"""Tracers: tools that wrap the worker's command line to record what it does (rocprofv3)."""
