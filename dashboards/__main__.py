"""`python -m dashboards [--check]`: write (or compare) the checked-in dashboard JSON."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import JSON_DIR, generate, generate_native, lib


def main(argv: list[str] | None = None) -> int:
    """Write every dashboard; with --check, only report files that differ (exit 1)."""
    parser = argparse.ArgumentParser(prog="python -m dashboards", description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    rc = 0
    for where, shown, made in ((JSON_DIR, "dashboards/json", generate()),
                               (JSON_DIR / "native", "dashboards/json/native", generate_native())):
        rc |= _sync(where, shown, {name: lib.dumps(data) for name, data in made.items()},
                    args.check)
    return rc


def _sync(where: Path, shown: str, wanted: dict[str, str], check: bool) -> int:
    where.mkdir(exist_ok=True)
    stale = sorted(p.name for p in where.glob("*.json") if p.name not in wanted)
    differ = [n for n, text in wanted.items() if not (where / n).is_file()
              or (where / n).read_text() != text]
    if check:
        for name in [*differ, *stale]:
            print(f"stale: {shown}/{name}", file=sys.stderr)
        return 1 if differ or stale else 0
    for name in differ:
        (where / name).write_text(wanted[name])
        print(f"wrote {shown}/{name}")
    for name in stale:
        (where / name).unlink()
        print(f"removed {shown}/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
