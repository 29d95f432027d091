"""What every layer of the server shares: wire types, errors, metrics and the engine's ports
(server-owned protocols; the adapters over the engine are built in ``api``).

Nothing here imports another part of ``server``; ``media`` and ``voice`` build on it,
``session`` on those, ``api`` and ``cluster`` on top (the layer contract in pyproject.toml).
"""
