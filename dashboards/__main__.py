"""`python -m dashboards [--check]`: write (or compare) the checked-in dashboard JSON."""

from __future__ import annotations

import argparse
import sys

from . import JSON_DIR, generate, lib


def main(argv: list[str] | None = None) -> int:
    """Write every dashboard; with --check, only report files that differ (exit 1)."""
    parser = argparse.ArgumentParser(prog="python -m dashboards", description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    wanted = {name: lib.dumps(data) for name, data in generate().items()}
    JSON_DIR.mkdir(exist_ok=True)
    stale = sorted(p.name for p in JSON_DIR.glob("*.json") if p.name not in wanted)
    differ = [n for n, text in wanted.items() if not (JSON_DIR / n).is_file()
              or (JSON_DIR / n).read_text() != text]
    if args.check:
        for name in [*differ, *stale]:
            print(f"stale: dashboards/json/{name}", file=sys.stderr)
        return 1 if differ or stale else 0
    for name in differ:
        (JSON_DIR / name).write_text(wanted[name])
        print(f"wrote dashboards/json/{name}")
    for name in stale:
        (JSON_DIR / name).unlink()
        print(f"removed dashboards/json/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
