"""The FastAPI application. Talks to assistant/ only."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.templating import Jinja2Templates
from sqlalchemy import text

from assistant.errors import AssistantError
from assistant.services import Services

TEMPLATES = Jinja2Templates(directory=Path(__file__).parent / "templates")


def create_app(services: Services | None = None) -> FastAPI:
    services = services or Services()

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        services.close()

    app = FastAPI(title="Assistant", lifespan=lifespan)
    app.state.services = services

    @app.exception_handler(AssistantError)
    async def _assistant_error(_request: Request, exc: AssistantError) -> JSONResponse:
        return JSONResponse(
            {"error": {"code": exc.code, "message": exc.message}}, status_code=exc.status
        )

    @app.get("/", response_class=HTMLResponse)
    async def index(request: Request) -> HTMLResponse:
        return TEMPLATES.TemplateResponse(request, "index.html", {})

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        with services.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        return {"status": "ok"}

    return app
