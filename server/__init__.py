"""Real-time serving: FastAPI app, aiortc peers, websocket control, playout, recording.

Entry points: ``server.api.app.create_app`` (the ASGI app factory) and ``server.cli.serve``
(what ``avatar serve`` runs).
"""
