"""The checkpoint store's LevelDB block cache: RSS of a process that restores a store of
`--units` unit rows and then commits `--commits` checkpoints of `--changed` units each, with
the store's setting (exporter/wiring/state/store.py: BLOCK_CACHE, FILL_ON_READ) beside
LevelDB's default (an 8 MiB cache, filled by the restore's read). Each case runs in a fresh
child Python, interleaved over `--repeat` rounds; the figure is the RSS the store added
(after the commits, less before the open) and its peak.

Run: python -m bench.store_cache [--units N] [--commits N] [--changed N] [--repeat K]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench._common import child_env, header, table

CHILD = """
import json, sys
from pathlib import Path
from bench._common import proc_status_kib
from exporter.wiring.state import store as s
cache, fill, path, commits, changed = sys.argv[1:6]
s.BLOCK_CACHE, s.FILL_ON_READ = int(cache), fill == "1"
before = proc_status_kib("VmRSS")
st = s.Store(Path(path))
state = st.read()
del state
for i in range(int(commits)):
    st.write(s.Changes(units=[("wl-%d" % (k % 100), "u%d" % ((i * 7919 + k) % 100000), i, 1, 1,
                               0, 0, None, "2026-03-01T12:00:00.123456789Z")
                              for k in range(int(changed))]))
after = proc_status_kib("VmRSS")
st.close()
print(json.dumps({"added": after - before, "peak": proc_status_kib("VmHWM") - before}))
"""


def _build(path: Path, units: int) -> None:
    from exporter.wiring.state.store import Changes, Store

    st = Store(path)
    st.write(Changes(full=True, workloads=[(f"wl-{w}", json.dumps({
        "v": 1, "next": 1, "last_at": "", "expired": 0, "sources": {}})) for w in range(100)],
        units=[(f"wl-{k % 100}", f"u{k}", k, 1, 1, 0, 0, None, "2026-03-01T12:00:00Z")
               for k in range(units)]))
    st.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--units", type=int, default=100_000)
    ap.add_argument("--commits", type=int, default=200)
    ap.add_argument("--changed", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    from exporter.wiring.state.store import BLOCK_CACHE, DB, FILL_ON_READ

    cases = {"LevelDB's default (8 MiB, filled by the restore)": (8 << 20, True),
             f"the store's ({BLOCK_CACHE >> 20} MiB, "
             f"{'filled' if FILL_ON_READ else 'not filled'} by the restore)":
                 (BLOCK_CACHE, FILL_ON_READ)}
    got: dict[str, list[dict[str, int]]] = {n: [] for n in cases}
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / DB
        _build(path, a.units)
        size = sum(f.stat().st_size for f in path.iterdir())
        names = list(cases)
        for r in range(a.repeat):
            for name in names[r % 2:] + names[:r % 2]:
                cache, fill = cases[name]
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, str(cache), "1" if fill else "0", str(path),
                     str(a.commits), str(a.changed)],
                    env=child_env(), check=True, capture_output=True, text=True).stdout
                got[name].append(json.loads(out))
    header(f"store block cache: {a.units:,} units ({size / 2**20:.1f} MiB on disk), "
           f"a restore and {a.commits} commits of {a.changed} units (RSS added, KiB)")
    print(table([["setting", "RSS added (median)", "peak (median)", "runs"]] + [
        [n, f"{statistics.median(x['added'] for x in v):,.0f}",
         f"{statistics.median(x['peak'] for x in v):,.0f}",
         " ".join(str(x["added"]) for x in v)] for n, v in got.items()]))


if __name__ == "__main__":
    main()
