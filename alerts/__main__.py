"""`python -m alerts`: regenerate alerts/rules/*.yaml and alerts/tests/*.yaml."""

from __future__ import annotations

import argparse

from alerts import render
from alerts.config import DEFAULT_CONFIG


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m alerts", description=__doc__)
    parser.parse_args(argv)
    for path in render.write(DEFAULT_CONFIG):
        print(path.relative_to(render.ROOT.parent))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
