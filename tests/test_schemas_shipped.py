"""The schemas shipped in ``schemas/`` are the contract's, unchanged, and all of them are loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter import contract
from tests.components import missing

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "schemas"
# The contract lives in a sibling checkout: <parent>/shared next to <parent>/<this repo>.
UPSTREAM = Path(__file__).parents[2] / "shared/contract/units/v1"
SUFFIX = ".schema.json"


@pytest.fixture(scope="module")
def upstream() -> Path:
    if not UPSTREAM.is_dir():
        missing(f"contract schemas not found at {UPSTREAM} (required in CI)")
    return UPSTREAM


def _names(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir() if p.is_file()}


def test_shipped_schemas_are_byte_identical(upstream: Path) -> None:
    expected = _names(upstream)
    assert len(expected) == 11
    assert _names(SHIPPED) == expected
    for name in sorted(expected):
        assert (SHIPPED / name).read_bytes() == (upstream / name).read_bytes(), name


def test_contract_loads_exactly_the_shipped_names(upstream: Path) -> None:
    expected = {name.removesuffix(SUFFIX) for name in _names(upstream)}
    assert set(contract.SCHEMA_NAMES) == expected
    assert set(contract.SCHEMAS) == expected
    assert len(contract.SCHEMA_NAMES) == len(expected) == 11


def test_contract_reads_the_shipped_files() -> None:
    """Without a packaged copy (editable install), contract.py reads the repository's schemas/."""
    if Path(str(contract.SCHEMA_DIR)).resolve() != SHIPPED:
        pytest.skip(f"schemas loaded from a packaged copy at {contract.SCHEMA_DIR}")
    assert {f"{name}{SUFFIX}" for name in contract.SCHEMAS} == _names(SHIPPED)
