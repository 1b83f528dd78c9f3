"""The REST API (v1): its routes, fast entrances and errors, mounted by :func:`service.app.create_app`
(which ``jobq serve`` runs under uvicorn) beside the console."""
