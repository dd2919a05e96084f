"""The `serve` processes: one slot a shard, each on its own port and state dir (on a small
tmpfs of its own when the machine lets us mount one), killed, stopped, restarted and resharded
by the schedule; an exporter that exits on its own is counted and started again, as a kubelet
would."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bench._common import ROOT, child_env, free_port

MAIN = "import sys; from exporter.cli import main; sys.exit(main())"


class Disk:
    """A small tmpfs for one state dir; `fill` takes every free byte, `free` gives them back."""

    def __init__(self, path: Path, size: str) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                              capture_output=True, check=False)  # fmt: skip
        self.mounted = done.returncode == 0
        self.filler = path / "filler"
        self.full = False  # filled and not yet freed

    def fill(self) -> bool:
        if not self.mounted:
            return False
        self.full = True
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for size in (256 << 10, 4 << 10, 1):
                while True:
                    try:
                        os.write(fd, b"\0" * size)
                    except OSError as e:
                        if e.errno != errno.ENOSPC:
                            raise
                        break
        finally:
            os.close(fd)
        return True

    def free(self) -> None:
        self.full = False
        with contextlib.suppress(FileNotFoundError):
            self.filler.unlink()

    def unmount(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], check=False)
            self.mounted = False


@dataclass
class Start:
    """One process of a slot: its name (the spans' `service.instance.id` begins with it), the
    fleet's epoch it ran in, and how it ended: None while running, "clean" (SIGTERM answered
    with exit 0 while its disk had room: it saved everything it sent), else "unclean"."""

    name: str
    epoch: int
    end: str | None = None


class Slot:
    """Shard `index`'s pod: a fixed port and state dir, one process at a time."""

    def __init__(self, index: int, root: Path, disk_size: str | None) -> None:
        self.index = index
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        base = root / f"exporter-{index}"
        self.disk = Disk(base / "disk", disk_size) if disk_size else None
        self.state_dir = (self.disk.path if self.disk else base) / "state"
        self.log_path = base / "serve.log"
        self.proc: asyncio.subprocess.Process | None = None
        self.wanted = False  # should be running (a kill or a stop makes it False for a while)
        self.starts = 0
        self.starting_on_full_disk = False
        self.start: Start | None = None  # the process now, or the last one

    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def pid(self) -> int | None:
        return self.proc.pid if self.running() and self.proc is not None else None


class Fleet:
    def __init__(self, root: Path, route_url: str, slots: int, shards: int, *,
                 disk_size: str | None, extra: tuple[str, ...] = (),
                 env: dict[str, str] | None = None, kube_url: str | None = None) -> None:
        self.route_url = route_url
        # UnitSignals from the API server at kube_url (the emulator), or none
        self.kube = ("--kube", "on", "--kube-api-url", kube_url) if kube_url else ("--kube", "off")
        self.slots = [Slot(i, root, disk_size) for i in range(slots)]
        self.shards = shards  # the shard count now; slots[:shards] are the fleet
        self.extra = extra
        self.env = child_env() | (env or {})
        self.epoch = 0  # bumped at each reshard: scrapers forget what they saw
        self.lock = asyncio.Lock()
        self.exits: Counter[str] = Counter()  # exits nobody asked for, by return code
        self.full_disk_exits = 0  # starts refused, as they should be, on a full state disk
        self._watch: asyncio.Task[None] | None = None
        self.starts: dict[str, Start] = {}  # every process the run started, by name

    def active(self) -> list[Slot]:
        return self.slots[: self.shards]

    def slot(self, target: int) -> Slot:
        return self.slots[target % self.shards]

    async def _spawn(self, slot: Slot) -> None:
        slot.state_dir.mkdir(parents=True, exist_ok=True)
        args = ["serve", "--listen", f"127.0.0.1:{slot.port}", "--events-url", self.route_url,
                *self.kube, "--log-level", "warning", "--wait", "1",
                "--poll-interval", "0.2", "--backoff-max", "0.5", "--discovery-interval", "1",
                "--state-dir", str(slot.state_dir),  # the default checkpoint interval
                "--total-shards", str(self.shards), "--shard", str(slot.index), *self.extra]
        start = Start(f"exporter-{slot.index}-{slot.starts + 1}", self.epoch)
        log = slot.log_path.open("ab")
        try:
            slot.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", MAIN, *args, cwd=ROOT,
                env=self.env | {"HOSTNAME": start.name},  # the spans' instance id names it
                stdout=asyncio.subprocess.DEVNULL, stderr=log)
        finally:
            log.close()
        slot.start = self.starts[start.name] = start
        slot.starts += 1
        slot.wanted = True

    async def _signal(self, slot: Slot, sig: signal.Signals) -> None:
        slot.wanted = False
        if slot.proc is not None and slot.proc.returncode is None:
            full = slot.disk is not None and slot.disk.full
            slot.proc.send_signal(sig)
            try:
                rc = await asyncio.wait_for(slot.proc.wait(), 30)
            except TimeoutError:  # a stop that hangs: counted, then killed
                self.exits["sigterm_hung"] += 1
                slot.proc.kill()
                rc = await slot.proc.wait()
            self._ended(slot, "clean" if sig is signal.SIGTERM and rc == 0 and not full
                        else "unclean")

    @staticmethod
    def _ended(slot: Slot, how: str) -> None:
        if slot.start is not None and slot.start.end is None:
            slot.start.end = how

    async def start(self) -> None:
        async with self.lock:
            for slot in self.active():
                await self._spawn(slot)
        self._watch = asyncio.create_task(self._restart_crashed())

    async def stop_slot(self, slot: Slot, sig: signal.Signals) -> bool:
        async with self.lock:
            if not slot.running() or slot.index >= self.shards or slot.starting_on_full_disk:
                return False
            await self._signal(slot, sig)
            return True

    async def restart_slot(self, slot: Slot) -> None:
        async with self.lock:
            if slot.index < self.shards and not slot.running():
                await self._spawn(slot)

    async def reshard(self, shards: int) -> bool:
        """Every exporter stopped (SIGTERM, as a StatefulSet rollout) and the new count started:
        the slots past it keep their state dirs for a later scale-up."""
        async with self.lock:
            if shards == self.shards or any(s.starting_on_full_disk for s in self.slots):
                return False
            for slot in self.slots:
                await self._signal(slot, signal.SIGTERM)
            self.shards = shards
            self.epoch += 1
            for slot in self.active():
                await self._spawn(slot)
            return True

    async def heal(self) -> None:
        """Every disk freed, every slot of the fleet running."""
        async with self.lock:
            for slot in self.slots:
                if slot.disk:
                    slot.disk.free()
            for slot in self.active():
                if not slot.running():
                    await self._spawn(slot)

    async def _restart_crashed(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            async with self.lock:
                for slot in self.active():
                    if slot.wanted and slot.proc is not None and slot.proc.returncode is not None:
                        self._ended(slot, "unclean")
                        if _said_disk_full(slot.log_path):
                            self.full_disk_exits += 1
                            await self._spawn(slot)
                            continue
                        self.exits[f"rc={slot.proc.returncode}"] += 1
                        print(f"  exporter {slot.index} exited on its own "
                              f"(rc={slot.proc.returncode}); see {slot.log_path}", flush=True)
                        await self._spawn(slot)

    async def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
        async with self.lock:
            for slot in self.slots:
                await self._signal(slot, signal.SIGTERM)
        for slot in self.slots:
            if slot.disk:
                slot.disk.unmount()


def _said_disk_full(log: Path) -> bool:
    """The exporter's last words were that its state disk is full (a start it must refuse)."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, log.stat().st_size - 2000))
            tail = f.read().strip().splitlines()
    except OSError:
        return False
    return bool(tail) and b"its file system is full" in tail[-1]


def rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def now() -> float:
    return time.monotonic()
