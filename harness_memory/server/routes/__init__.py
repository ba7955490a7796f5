"""Route areas of the control plane, one module each (``server.app`` has the path map).

Each module has an ``add_*_routes(router, ctx, …)`` that registers its endpoints directly on the
given router (FastAPI then builds every route once). No ``from __future__ import annotations``
in these modules: FastAPI reads endpoint signatures at runtime, and the ``Annotated`` aliases
they use are local to the ``add_*`` functions.
"""
