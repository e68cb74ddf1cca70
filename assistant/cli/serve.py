"""`assistant serve`."""

from __future__ import annotations

import typer

from assistant.settings import Settings


def serve(
    host: str = typer.Option(None, "--host", help="Bind address (default ASSISTANT_HOST)."),
    port: int = typer.Option(None, "--port", help="Port (default ASSISTANT_PORT)."),
) -> None:
    """Start the web app."""
    import uvicorn

    settings = Settings()
    uvicorn.run(
        "web.app:create_app",
        factory=True,
        host=host or settings.host,
        port=port or settings.port,
        log_level="info",
    )
