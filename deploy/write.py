"""`python -m deploy`: writes every generated file of deploy/, or says which are stale.

Two generators feed it: deploy/generate.py (the kustomize manifests) and deploy/chart.py (the
Helm chart's files, built on the former's CRD and names). This module sits above both, so the
imports go one way: write -> chart -> generate.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from deploy import chart, generate


def outputs() -> dict[Path, str]:
    """Every generated file of deploy/ and its exact content."""
    return {**generate.outputs(), **chart.outputs()}


def stale() -> list[Path]:
    """Generated files whose content differs from what would be written, plus leftovers."""
    want = outputs()
    bad = [p for p, text in want.items()
           if not p.exists() or p.read_text(encoding="utf-8") != text]
    if generate.GENERATED.exists():
        bad += [p for p in sorted(generate.GENERATED.iterdir()) if p not in want]
    return bad + chart.leftovers(want)


def write() -> list[Path]:
    """Writes what is stale and removes leftovers; returns the paths changed."""
    want = outputs()
    changed = stale()
    for path in changed:
        if path in want:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(want[path], encoding="utf-8")
        else:
            path.unlink()
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy",
                                     description=generate.__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if a generated file is stale, without writing")
    args = parser.parse_args(argv)
    root = generate.ROOT
    if args.check:
        bad = stale()
        for p in bad:
            print(f"stale: {p.relative_to(root)} (run python -m deploy)", file=sys.stderr)
        return 1 if bad else 0
    for p in write():
        print(f"wrote {p.relative_to(root)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
