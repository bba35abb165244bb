"""The operator's step edit: which edit, of which step, with what new step.

The page's form posts ``edit`` (add, insert, replace, delete, reset), ``step`` and ``new`` (the
new step as JSON text), URL-encoded; a script posts JSON ``{"edit": "insert", "step": "a",
"new": {...}, "expected": "sha256:..."}``. Job management checks and makes it
(``JobControl.edit_steps``), as for the MES's EditSteps.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs

from starlette.requests import Request

from gateway.controls import EditOp, StepEdit
from gateway.errors import ValidationError

EDIT = "edit"  # the action's name in .../jobs/{job}/actions/{action}


async def request_fields(request: Request) -> dict[str, Any]:
    """The fields of an action's request: a JSON object, or the form and query parameters."""
    body = (await request.body()).decode("utf-8", "replace")
    if request.headers.get("content-type", "").startswith("application/json"):
        try:
            data = json.loads(body or "{}")
        except ValueError as error:
            raise ValidationError("body", f"is not JSON: {error}") from None
        if not isinstance(data, dict):
            raise ValidationError("body", "must be a JSON object")
        return data
    form: dict[str, Any] = {key: values[-1] for key, values in parse_qs(body).items()}
    form.update(request.query_params)
    return form


async def edit_arguments(request: Request) -> tuple[StepEdit, str | None]:
    """The edit and the recipe version it is made against; ``ValidationError`` names what is
    wrong."""
    fields = await request_fields(request)
    try:
        op = EditOp(str(fields.get("edit")))
    except ValueError:
        choices = ", ".join(op.value for op in EditOp)
        raise ValidationError("edit", f"must be one of {choices}") from None
    new = fields.get("new")
    if isinstance(new, str):
        try:
            new = json.loads(new) if new.strip() else None
        except ValueError as error:
            raise ValidationError("new", f"is not JSON: {error}") from None
    step = fields.get("step") or None
    expected = fields.get("expected") or None
    return StepEdit(op, step, new), expected
