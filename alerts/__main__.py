"""`python -m alerts`: regenerate alerts/rules/*.yaml and alerts/tests/*.yaml.

With `--output DIR`, write only the rule files into DIR instead: rules for an installation
that hosts its runbooks elsewhere (`--runbook-base`), or whose Prometheus scrapes native
histograms (`--native-histograms`), leaving the checked-in files alone.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

from alerts import render
from alerts.config import DEFAULT_CONFIG, check_runbook_base

ENV_RUNBOOK_BASE = "ZAROZ_ALERTS_RUNBOOK_BASE"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m alerts", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--runbook-base", default=os.environ.get(ENV_RUNBOOK_BASE, DEFAULT_CONFIG.runbook_base),
        help="base URL of docs/runbooks.md; each runbook_url is <base>#<alert in lower case> "
        f"[env {ENV_RUNBOOK_BASE}] (default: %(default)s)",
    )
    parser.add_argument("--output", type=Path,
                        help="write only the rule files, into this directory")
    parser.add_argument("--native-histograms", action="store_true",
                        help="with --output: quantile and SLO rules over native histograms "
                        "(the rules of alerts/rules/native/)")
    args = parser.parse_args(argv)
    try:
        config = replace(DEFAULT_CONFIG, runbook_base=check_runbook_base(args.runbook_base),
                         native_histograms=args.native_histograms)
    except ValueError as e:
        print(f"python -m alerts: --runbook-base: {e}", file=sys.stderr)
        return 2
    if args.output is not None:
        args.output.mkdir(parents=True, exist_ok=True)
        for name, text in render.rule_files(config).items():
            (args.output / name).write_text(text)
            print(args.output / name)
        return 0
    if config != DEFAULT_CONFIG:
        print("python -m alerts: --runbook-base or --native-histograms without --output would "
              "make the checked-in rules differ from alerts/config.py; give --output DIR",
              file=sys.stderr)
        return 2
    for path in render.write(config):
        print(path.relative_to(render.ROOT.parent))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
