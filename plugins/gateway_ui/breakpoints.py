"""The operator's breakpoint action: which step, set or cleared, from a form or JSON.

The page's form posts ``step`` and, to clear, ``clear=1`` (URL-encoded); a script posts JSON
``{"step": "b", "enabled": false}``. Either way job management checks and sets it
(``JobControl.set_breakpoint``), as for the MES's SetBreakpoint.
"""

from __future__ import annotations

import json
from urllib.parse import parse_qs

from starlette.requests import Request

from gateway.errors import ValidationError

BREAKPOINT = "breakpoint"  # the action's name in .../jobs/{job}/actions/{action}


async def breakpoint_arguments(request: Request) -> tuple[str, bool]:
    """The step and whether to set (``True``) or clear; ``ValidationError`` names what is wrong."""
    body = (await request.body()).decode("utf-8", "replace")
    if request.headers.get("content-type", "").startswith("application/json"):
        try:
            data = json.loads(body or "{}")
        except ValueError as error:
            raise ValidationError("body", f"is not JSON: {error}") from None
        if not isinstance(data, dict):
            raise ValidationError("body", "must be a JSON object {step, enabled}")
        step, enabled = data.get("step"), data.get("enabled", True)
    else:
        form = {key: values[-1] for key, values in parse_qs(body).items()}
        form.update(request.query_params)
        step, enabled = form.get("step"), form.get("clear") not in ("1", "on", "true")
    if not isinstance(step, str) or not step.strip():
        raise ValidationError("step", "is required: the step to pause before")
    if not isinstance(enabled, bool):
        raise ValidationError("enabled", "must be true or false")
    return step.strip(), enabled
