"""The import contracts in pyproject.toml hold (the check ``make test`` runs as ``lint-imports``): the
server's layers run one way, the engine imports nothing of the server, and inference imports no
evaluation or training code."""

from __future__ import annotations

from pathlib import Path

from importlinter.application.use_cases import lint_imports
from importlinter.configuration import configure

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept(capsys) -> None:
    configure()
    kept = lint_imports(config_filename=str(ROOT / "pyproject.toml"), cache_dir=None, no_logo=True)
    assert kept, capsys.readouterr().out
