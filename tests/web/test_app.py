from __future__ import annotations

from fastapi.testclient import TestClient

from assistant.services import Services
from assistant.settings import Settings
from web.app import create_app


def test_serves_a_page_and_a_health_check(tmp_path) -> None:
    app = create_app(Services(Settings(data_dir=tmp_path)))
    with TestClient(app) as client:
        page = client.get("/")
        assert page.status_code == 200 and "<h1>Assistant</h1>" in page.text
        assert client.get("/healthz").json() == {"status": "ok"}
