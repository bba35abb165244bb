"""MessagePack-RPC binding and equipment driver: equipment over msgpack on TCP (optionally TLS).

Frames are MessagePack-RPC messages, back to back on the stream (no length prefix):
request ``[0, msgid, method, params]``, response ``[1, msgid, error, result]``, notification
``[2, method, params]``. ``error`` is ``nil`` on success, else ``{"code": str, "message": str}``.
CloudEvents travel as MessagePack maps in structured mode (``gateway_msgpack_rpc.codec``):
attributes by name, ``data`` as a MessagePack value.

Two ways to connect, same methods either way:

1. **Equipment connects to the gateway** (``[msgpack_rpc] port``; 0, the default, opens none).
   Methods the gateway serves:

   - ``hello(equipment_id[, token]) -> {"equipment", "gateway", "heartbeat_timeout_seconds",
     "max_request_bytes"}``: names the equipment this connection is. Required before
     ``publish``; a later ``hello`` / ``heartbeat`` must repeat the same id. When a second
     connection names the same equipment, the newest wins and the older one is closed. What
     proves the id is ``device_auth`` (``gateway_msgpack_rpc.auth``): nothing, the ``token``,
     or the TLS client certificate; a refused one is answered ``not-authorized`` and the
     connection closed.
   - ``heartbeat(equipment_id) -> true``: a sign of life; the first one also identifies the
     connection. A connection that sends nothing for ``heartbeat_timeout_seconds`` is closed
     and its equipment is offline.
   - ``publish(event) -> [event, ...]``: an event from the equipment, dispatched on
     ``<topic_prefix>/<equipment id>/publish`` with an ``equipment`` extension set to the
     connection's id. One carrying a ``correlationid`` is the reply to that command (an
     ``errorcode`` / ``errormessage`` marks a failed command); one without is an equipment
     event (a ``pull_event``; a ``joborderid`` extension names its job). The result is the
     list of reply events of the processor that took it: ``[]`` for equipment replies and
     events, a processor's own replies (or its error reply) otherwise. A reply to a command
     that was not sent to this connection's equipment is answered with an error reply
     ``not-permitted`` and goes no further.

   The gateway sends each command as the notification ``command(event)``, a CloudEvent shaped
   like the MQTT equipment driver's commands: ``type`` is the action's ``type_id``,
   ``subject`` the scope, ``id`` and ``correlationid`` the correlation id
   ``{job}:{action}:{attempt}`` (repeated when a command is re-sent: equipment must handle a
   repeated one idempotently), extensions ``equipment``, ``joborderid`` and ``action``,
   ``expiryinterval`` the action's timeout, ``data`` a map with ``parameters`` and
   ``job_parameters``.

2. **The gateway connects to equipment** that is an RPC server (``[msgpack_rpc] equipment =
   ["id=host:port", "id=tls://host:port"]``), reconnecting with backoff. It calls
   ``command(event) -> [event, ...] | nil`` on the equipment: the call's result carries the
   reply (and any events), handled exactly like a ``publish``; an error response is the
   command's failure. The equipment may also answer later (``nil`` result) by calling
   ``publish`` on the same connection: the gateway serves ``hello``, ``heartbeat`` and
   ``publish`` there too.

Liveness goes to the host's equipment hub (``gateway.equipment``), shared by every instance:
equipment is online while it has a connection (renewed every third of
``heartbeat_timeout_seconds`` while the connection is open, and on every sign of life) and
offline, with the reason, as soon as the connection ends (``gateway_msgpack_rpc.liveness``).

Errors (``error.code``): ``parse-error`` (not MessagePack), ``invalid-message`` (not a
request/response/notification array of the right shape), ``request-too-large`` (frame over
``max_request_bytes``), ``method-not-found``, ``invalid-params``, ``invalid-request`` (an invalid
CloudEvent; the message names the attribute), ``not-identified`` (``publish`` before ``hello``),
``not-authorized`` (a refused credential), ``internal-error``. A malformed request is answered with
its msgid, or with msgid ``nil`` when it has none that can be read; a malformed notification or
response is only logged. The connection stays open, except after an oversize frame longer than
``max_skip_bytes``. After bytes that are not MessagePack at all, the bytes of that read are dropped
(there is no way to find the next frame in them); a request pipelined right behind garbage may
therefore go unanswered.

What other plugins and equipment-side tools may use is exported here: ``RpcDevice`` (equipment
that connects to the gateway, e.g. the simulator's RPC devices), ``RpcEquipmentServer``
(equipment that is an RPC server), the errors, the binding and its settings section.
"""

from gateway_msgpack_rpc.binding import BINDING, EquipmentOffline, MsgpackRpcBinding
from gateway_msgpack_rpc.device import RpcDevice, RpcEquipmentServer
from gateway_msgpack_rpc.protocol import RpcConnectionClosed, RpcError
from gateway_msgpack_rpc.settings import SECTION, MsgpackRpcSettings

__all__ = [
    "BINDING",
    "SECTION",
    "EquipmentOffline",
    "MsgpackRpcBinding",
    "MsgpackRpcSettings",
    "RpcConnectionClosed",
    "RpcDevice",
    "RpcEquipmentServer",
    "RpcError",
]
