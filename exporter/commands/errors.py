"""The one error a configuration mistake ends in: its own module, so that the command line can
catch it without importing the checks (replay starts without them)."""

from __future__ import annotations


class ConfigError(Exception):
    """A flag's value cannot work. `line()` is the one line the CLI prints."""

    def __init__(self, flag: str, value: object, cause: str) -> None:
        super().__init__(f"{flag}: {cause}" if value is None else f"{flag} {value!r}: {cause}")
        self.flag, self.value, self.cause = flag, value, cause

    def line(self, command: str = "") -> str:
        prog = f"zaroz-exporter {command}".rstrip()
        return f"{prog}: error: {self}"
