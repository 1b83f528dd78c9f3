"""The REST API (v1): :func:`create_app` builds it; ``jobq serve`` runs it under uvicorn."""

from service.api.app import create_app

__all__ = ["create_app"]
