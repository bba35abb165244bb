"""OPC UA method calls -> ``gateway.job_methods``: the same job control as the MQTT path.

A call's input arguments are checked against the method's signature first; what does not fit
gets the OPC UA status codes a client expects, with the offending argument marked in
``InputArgumentResults``:

- ``BadArgumentsMissing`` / ``BadTooManyArguments``: wrong number of arguments;
- ``BadTypeMismatch``: an argument of the wrong type (a String where a JobOrder belongs);
- ``BadInvalidArgument``: the right type with content job management refuses (an empty
  JobOrderID, an unknown state in JobOrderState); nothing changes;
- ``BadMethodInvalid``: a method called on another object than its own;
- ``BadInternalError``: the store could not be reached (logged); the client may retry.

Everything else is a ``Good`` call whose ``ReturnStatus`` output says what happened (1 success,
2 unknown job order, 8 not allowed in the job's state, 16 not accepted), exactly as on MQTT.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from asyncua import ua

from gateway.errors import ValidationError
from gateway.jobmethods import RETURN_STATUS, JobMethod, JobMethods, MethodResult
from gateway.logs import log_context
from gateway.peers import LogOnce
from gateway_opcua.convert import ConversionError, from_json, to_json, ua_type

log = logging.getLogger(__name__)

StatusCodes = ua.StatusCodes


@dataclass(frozen=True)
class Argument:
    name: str
    kind: str  # the ua class name (generated for the ISA-95 types)
    array: bool = False
    optional: bool = False  # may be left out or null (Comment)


_COMMENT = Argument("Comment", "LocalizedText", array=True, optional=True)
_JOB_ORDER_ID = Argument("JobOrderID", "String")
SIGNATURES: Mapping[JobMethod, tuple[Argument, ...]] = {
    **{
        method: (Argument("JobOrder", "ISA95JobOrderDataType"), _COMMENT)
        for method in (JobMethod.STORE, JobMethod.STORE_AND_START, JobMethod.UPDATE)
    },
    **dict.fromkeys(
        (
            JobMethod.START,
            JobMethod.REVOKE_START,
            JobMethod.STOP,
            JobMethod.PAUSE,
            JobMethod.RESUME,
            JobMethod.ABORT,
            JobMethod.CANCEL,
            JobMethod.CLEAR,
        ),
        (_JOB_ORDER_ID, _COMMENT),
    ),
    JobMethod.REQUEST_JOB_RESPONSE_BY_JOB_ORDER_ID: (_JOB_ORDER_ID,),
    JobMethod.REQUEST_JOB_RESPONSE_BY_JOB_ORDER_STATE: (
        Argument("JobOrderState", "ISA95StateDataType", array=True),
    ),
}


class BadCall(Exception):
    """A call refused with ``status``; ``argument`` is the index of the culprit, if one."""

    def __init__(self, status: int, reason: str, argument: int | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.argument = argument


class MethodCalls:
    """The callback of every job method node of one scope."""

    def __init__(
        self, methods: JobMethods, scope: str, *, names: int, max_argument_bytes: int = 1_048_576
    ) -> None:
        self.methods = methods
        self.scope = scope
        self.names = names  # the ISA-95 namespace: the job structures' bare browse names
        self.max_argument_bytes = max_argument_bytes
        self._failures = LogOnce(log, level=logging.ERROR)  # by method and error type

    def callback(self, method: JobMethod, parent: ua.NodeId) -> Any:
        """What ``server.link_method`` gets for ``method``, on the object ``parent``."""

        async def call(object_id: ua.NodeId, *arguments: ua.Variant) -> ua.CallMethodResult:
            return await self.call(method, parent, object_id, list(arguments))

        return call

    async def call(
        self,
        method: JobMethod,
        parent: ua.NodeId,
        object_id: ua.NodeId,
        arguments: list[ua.Variant],
    ) -> ua.CallMethodResult:
        signature = SIGNATURES[method]
        try:
            if object_id != parent:
                raise BadCall(
                    StatusCodes.BadMethodInvalid, f"{method} is not a method of that object"
                )
            json_arguments = _arguments(signature, arguments, self.names)
            size = len(json.dumps(json_arguments, default=str))
            if size > self.max_argument_bytes:
                raise BadCall(
                    StatusCodes.BadRequestTooLarge,
                    f"arguments of {size} bytes exceed the limit of {self.max_argument_bytes} "
                    "(opcua.max_argument_bytes)",
                )
            with log_context(scope=self.scope, job=_job_order_id(json_arguments)):
                result = await self._call(method, json_arguments)
                outputs = _outputs(method, result, self.names)
        except BadCall as bad:
            log.info("OPC UA %s on %s refused: %s", method, self.scope, bad)
            return _refusal(bad, len(arguments))
        return ua.CallMethodResult(
            StatusCode=ua.StatusCode(StatusCodes.Good),
            InputArgumentResults=[ua.StatusCode(StatusCodes.Good)] * len(arguments),
            OutputArguments=outputs,
        )

    async def _call(self, method: JobMethod, arguments: dict[str, Any]) -> MethodResult:
        try:
            result = await self.methods.call(self.scope, method, arguments)
        except ValidationError as error:  # content job management refuses: nothing changed
            raise BadCall(
                StatusCodes.BadInvalidArgument, str(error), _argument_index(method, error.element)
            ) from None
        except Exception as error:
            # Once a minute per kind of failure, with its traceback: a client repeating a call
            # that fails must not flood the log.
            self._failures.report(
                f"{method} {type(error).__name__}",
                "OPC UA %s on %s failed",
                method,
                self.scope,
                exc_info=True,
            )
            raise BadCall(
                StatusCodes.BadInternalError, f"{type(error).__name__}: {error}"
            ) from None
        if not result.ok:
            log.info(
                "OPC UA %s on %s: ReturnStatus %d: %s",
                method,
                self.scope,
                result.return_status,
                result.message,
            )
        return result


def _arguments(
    signature: Sequence[Argument], arguments: list[ua.Variant], names: int
) -> dict[str, Any]:
    """The JSON arguments of a call, after checking count and types."""
    if len(arguments) > len(signature):
        raise BadCall(StatusCodes.BadTooManyArguments, f"takes {len(signature)} arguments")
    required = sum(1 for argument in signature if not argument.optional)
    if len(arguments) < required:
        raise BadCall(StatusCodes.BadArgumentsMissing, f"needs {required} arguments")
    values: dict[str, Any] = {}
    for index, (argument, variant) in enumerate(zip(signature, arguments, strict=False)):
        value = variant.Value
        if value is None:
            if argument.optional:
                continue
            raise BadCall(StatusCodes.BadTypeMismatch, f"{argument.name} is missing", index)
        items = value if argument.array else [value]
        if not isinstance(items, list) or not all(_is(item, argument.kind) for item in items):
            expected = f"{argument.kind}{'[]' if argument.array else ''}"
            raise BadCall(StatusCodes.BadTypeMismatch, f"{argument.name} must be {expected}", index)
        try:
            values[argument.name] = to_json(value, names)
        except (ConversionError, TypeError, ValueError, AttributeError) as error:
            raise BadCall(
                StatusCodes.BadDecodingError, f"{argument.name} cannot be decoded: {error}", index
            ) from None
    return values


def _is(value: Any, kind: str) -> bool:
    if kind == "String":
        return isinstance(value, str)
    return isinstance(value, ua_type(kind))


def _argument_index(method: JobMethod, element: str) -> int | None:
    """The argument a ``ValidationError`` names (``data.JobOrder.JobOrderID`` -> JobOrder);
    a check of the call as a whole (``data``) is a check of its first argument, the job's id."""
    if element == "data":
        return 0
    path = element.removeprefix("data.").replace("[", ".")
    first = path.split(".", 1)[0]
    for index, argument in enumerate(SIGNATURES[method]):
        if argument.name.lower() == first.lower():
            return index
    return None


def _refusal(bad: BadCall, count: int) -> ua.CallMethodResult:
    results = [ua.StatusCode(StatusCodes.Good)] * count
    if bad.argument is not None and bad.argument < count:
        results[bad.argument] = ua.StatusCode(bad.status)
    return ua.CallMethodResult(StatusCode=ua.StatusCode(bad.status), InputArgumentResults=results)


def _outputs(method: JobMethod, result: MethodResult, names: int) -> list[ua.Variant]:
    # The methods declare ReturnStatus UInt64 (OPC 40001-3).
    status = ua.Variant(result.return_status, ua.VariantType.UInt64)
    if method is JobMethod.REQUEST_JOB_RESPONSE_BY_JOB_ORDER_ID:
        response = result.output.get("JobResponse")
        value = None if response is None else job_response(response, names)
        return [ua.Variant(value, ua.VariantType.ExtensionObject), status]
    if method is JobMethod.REQUEST_JOB_RESPONSE_BY_JOB_ORDER_STATE:
        responses = [job_response(item, names) for item in result.output.get("JobResponses", [])]
        return [ua.Variant(responses, ua.VariantType.ExtensionObject, is_array=True), status]
    assert RETURN_STATUS in result.output
    return [status]


def job_response(document: Mapping[str, Any], names: int) -> Any:
    """An ``ISA95JobResponseDataType`` from its JSON (bare browse names in namespace ``names``)."""
    try:
        return from_json(dict(document), ua_type("ISA95JobResponseDataType"), "JobResponse", names)
    except ConversionError as error:
        log.error("a stored Job Response does not fit ISA95JobResponseDataType: %s", error)
        raise BadCall(StatusCodes.BadInternalError, str(error)) from None


def _job_order_id(arguments: Mapping[str, Any]) -> str | None:
    """The job a call is about, when it names one (for log lines only)."""
    named = arguments.get("JobOrderID")
    order = arguments.get("JobOrder")
    if isinstance(order, Mapping):
        named = order.get("JobOrderID")
    return named if isinstance(named, str) else None
