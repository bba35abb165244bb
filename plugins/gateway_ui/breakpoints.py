"""The operator's breakpoint action: which step, set or cleared, from a form or JSON.

The page's form posts ``step`` and, to clear, ``clear=1`` (URL-encoded); a script posts JSON
``{"step": "b", "enabled": false}``. Either way job management checks and sets it
(``JobControl.set_breakpoint``), as for the MES's SetBreakpoint.
"""

from __future__ import annotations

from starlette.requests import Request

from gateway.errors import ValidationError
from gateway_ui.edits import request_fields

BREAKPOINT = "breakpoint"  # the action's name in .../jobs/{job}/actions/{action}


async def breakpoint_arguments(request: Request) -> tuple[str, bool]:
    """The step and whether to set (``True``) or clear; ``ValidationError`` names what is wrong."""
    fields = await request_fields(request)
    step = fields.get("step")
    if "enabled" in fields:
        enabled = fields["enabled"]
    else:
        enabled = fields.get("clear") not in ("1", "on", "true")
    if not isinstance(step, str) or not step.strip():
        raise ValidationError("step", "is required: the step to pause before")
    if not isinstance(enabled, bool):
        raise ValidationError("enabled", "must be true or false")
    return step.strip(), enabled
