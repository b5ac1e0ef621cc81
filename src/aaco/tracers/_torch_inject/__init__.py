"""The folder ``aaco profile --tracer torch`` puts first on the command's ``PYTHONPATH``; only
its ``sitecustomize`` matters (:mod:`aaco.tracers.torch`)."""
