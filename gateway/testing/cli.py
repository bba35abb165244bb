"""Running the ``gateway`` command as a user does: a process of its own, output captured.

For tests of the CLI's behaviour (exit statuses, messages, what a pipe receives)::

    done = run_gateway("config", "show", environ=command_environ(GATEWAY_HTTP_PORT="99999"))
    assert done.returncode == 2 and "http.port" in done.stderr
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from gateway.settings import ENV_PREFIX


def gateway_command() -> list[str]:
    """The installed ``gateway`` script next to this Python, else ``python -m gateway.cli``."""
    script = Path(sys.executable).with_name("gateway")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "gateway.cli"]


def command_environ(**settings: str) -> dict[str, str]:
    """This process's environment without its ``GATEWAY_*`` variables, plus ``settings``.

    Columns are fixed at 80 so output that adapts to the terminal is checked at a normal width.
    """
    environ = {name: value for name, value in os.environ.items() if not name.startswith(ENV_PREFIX)}
    environ.update(settings)
    environ.setdefault("COLUMNS", "80")
    return environ


def run_gateway(
    *args: str,
    environ: dict[str, str] | None = None,
    timeout: float = 120,
    **options: Any,
) -> subprocess.CompletedProcess[str]:
    """``gateway *args`` to completion; ``stdout``/``stderr`` captured as text unless given."""
    options.setdefault("stdout", subprocess.PIPE)
    options.setdefault("stderr", subprocess.PIPE)
    return subprocess.run(
        [*gateway_command(), *args],
        env=command_environ() if environ is None else environ,
        timeout=timeout,
        text=True,
        check=False,
        **options,
    )
