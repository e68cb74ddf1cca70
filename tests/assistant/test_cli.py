from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_runner import run_cli


def test_db_and_users_end_to_end(tmp_path: Path) -> None:
    assert run_cli("db", "upgrade", data_dir=tmp_path).returncode == 0
    assert (tmp_path / "assistant.db").exists()
    made = run_cli(
        "users",
        "create",
        "--email",
        "hr@example.com",
        "--password",
        "long enough",
        "--role",
        "admin",
        "--groups",
        "hr,finance",
        data_dir=tmp_path,
    )
    assert made.returncode == 0, made.stderr
    listed = run_cli("users", "list", "--json", data_dir=tmp_path)
    assert json.loads(listed.stdout) == [
        {"id": 1, "email": "hr@example.com", "role": "admin", "groups": ["finance", "hr"]}
    ]
    down = run_cli("db", "downgrade", "base", data_dir=tmp_path)
    assert down.returncode == 0 and "base" in down.stdout


@pytest.mark.parametrize(
    "args",
    [
        ("bogus",),
        ("users", "create", "--email", "x@example.com"),
        ("users", "create", "--email", "x@example.com", "--password", "short"),
        (
            "users",
            "create",
            "--email",
            "x@example.com",
            "--password",
            "long enough",
            "--role",
            "king",
        ),
        ("serve", "--port", "not-a-number"),
    ],
)
def test_bad_arguments_give_one_line_and_exit_code_2(tmp_path: Path, args) -> None:
    run_cli("db", "upgrade", data_dir=tmp_path)
    result = run_cli(*args, data_dir=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr


@pytest.mark.parametrize("group", ["serve", "db", "users"])
def test_every_command_has_help(tmp_path: Path, group: str) -> None:
    result = run_cli(group, "--help", data_dir=tmp_path)
    assert result.returncode == 0 and "Usage:" in result.stdout
