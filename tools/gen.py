"""`python -m tools.gen [--check]`: regenerate every derived artefact, in dependency order.

docs (metric reference, README tables) -> alerts (rules, promtool cases) -> dashboards (JSON)
-> deploy (CRD, PrometheusRules and dashboard ConfigMaps from the two before) -> the mixin's
templates (tools.mixin, from the same rule and dashboard builders). One command
instead of four; `--check` runs them all, reports what would change, puts every file back as it
was and exits 1 when anything is stale.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEPS = ("tools.docsgen", "alerts", "dashboards", "deploy", "tools.mixin")
# Where the generators write: everything here is compared in --check.
OUTPUTS = ("README.md", "docs", "alerts/rules", "alerts/tests", "dashboards/json", "deploy",
           "mixin")


def _files() -> dict[Path, bytes]:
    out: dict[Path, bytes] = {}
    for name in OUTPUTS:
        p = ROOT / name
        paths = [p] if p.is_file() else [f for f in p.rglob("*") if f.is_file()]
        for f in paths:
            if "__pycache__" not in f.parts:
                out[f] = f.read_bytes()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.gen", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="report stale files and leave the tree unchanged (exit 1 if any)")
    args = parser.parse_args(argv)
    before = _files()
    for module in STEPS:
        run = subprocess.run([sys.executable, "-m", module], cwd=ROOT, capture_output=True,
                             text=True)
        if run.returncode != 0:
            print(f"python -m {module} failed:\n{run.stderr}", file=sys.stderr)
            return 2
    after = _files()
    changed = sorted({p for p in before.keys() | after.keys() if before.get(p) != after.get(p)})
    for p in changed:
        print(("stale: " if args.check else "wrote: ") + str(p.relative_to(ROOT)))
    if not args.check:
        return 0
    for p in changed:  # put the tree back as it was
        if p in before:
            p.write_bytes(before[p])
        else:
            p.unlink()
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
