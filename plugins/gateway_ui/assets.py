"""The pages' style sheet and script, served from the gateway itself (no CDN, no build step).

Plain files next to this module (``static/app.css``, ``static/app.js``), read once at import.
"""

from __future__ import annotations

from importlib.resources import files

_STATIC = files("gateway_ui") / "static"
CSS = (_STATIC / "app.css").read_text(encoding="utf-8")
JS = (_STATIC / "app.js").read_text(encoding="utf-8")
