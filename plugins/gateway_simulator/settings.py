"""The ``[simulator]`` settings section."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.settings import PORT_MAXIMUM, setting
from gateway.topics import SIMULATOR_PREFIX, check_topic_level, check_topic_prefix


@dataclass(frozen=True)
class SimulatorSettings:
    enabled: bool = setting(
        False,
        "Run the simulated station (positioning unit, tightening controller, camera QA) in "
        "this process (roles 'simulator' and 'all') and drive it from every instance",
    )
    mqtt_url: str = setting(
        "",
        "Broker the simulated equipment connects to; empty: the gateway's mqtt.url",
        schemes=("mqtt", "mqtts", "memory"),
    )
    topic_prefix: str = setting(
        SIMULATOR_PREFIX,
        "Topic prefix of the simulated equipment (<prefix>/<equipment>/commands...)",
    )
    type_prefix: str = setting(
        "com.example.station",
        "CloudEvent types: <prefix>.position.v1, .tighten.v1 and .inspect.v1 (commands), "
        ".qa_result.v1 and .torque_result.v1 (events)",
    )
    positioner: str = setting("positioner", "Equipment name of the positioning unit; empty: none")
    tightener: str = setting(
        "tightener", "Equipment name of the tightening controller; empty: none"
    )
    camera: str = setting("camera", "Equipment name of the camera QA station; empty: none")
    clamp: str = setting(
        "", "Equipment name of a part clamp (clamp.v1, unclamp.v1 commands); empty: none"
    )
    nutrunners: list[str] = setting(
        [], "Names of more tightening controllers (identical nutrunners, for fan-outs)"
    )
    faults: list[str] = setting(
        [],
        "Injected faults: '<device>' fails every command to it, '<device>.<command>' only "
        "that command (clamp.unclamp: the clamp's unclamp commands)",
    )
    position_seconds: float = setting(0.2, "How long positioning takes", minimum=0)
    tighten_seconds: float = setting(0.3, "How long a tightening takes", minimum=0)
    inspect_seconds: float = setting(0.6, "How long a camera inspection takes", minimum=0)
    torque_setpoint: float = setting(
        85.0, "Set point (Nm) when neither the command nor the job gives a torque_spec", minimum=0
    )
    torque_noise: float = setting(
        0.8, "Standard deviation (Nm) of the torque around the set point", minimum=0
    )
    torque_tolerance_percent: float = setting(
        5.0, "torque_ok when the torque is within this percentage of the set point", minimum=0
    )
    failure_rate: float = setting(
        0.0, "Share of tightening commands the controller fails (0..1)", minimum=0
    )
    qa_fail_rate: float = setting(0.0, "Share of parts the camera rejects (0..1)", minimum=0)
    events_name_job: bool = setting(
        True,
        "Events carry the job's scope and id (subject, joborderid); false: they name only the "
        "equipment, as a PLC that knows no jobs (the gateway gives each to the job holding it)",
    )
    seed: int | None = setting(
        None, "Random seed (same seed, same results); empty: different each run"
    )
    heartbeat_seconds: float = setting(
        1.0,
        "Heartbeat interval of the MQTT devices; the gateway counts 3 missed ones as offline "
        "(RPC devices beat as the gateway's RPC server asks)",
        minimum=0.01,
    )
    rpc_devices: list[str] = setting(
        [],
        "Devices (by equipment name) that speak MessagePack-RPC instead of MQTT: they connect "
        "to the RPC server at rpc_host:rpc_port as equipment does",
    )
    rpc_host: str = setting(
        "",
        "RPC server the RPC devices connect to; empty: the gateway's msgpack_rpc.host "
        "(127.0.0.1 when it listens on every address)",
    )
    rpc_port: int = setting(
        0,
        "Port of that RPC server; 0: the gateway's msgpack_rpc.port",
        minimum=0,
        maximum=PORT_MAXIMUM,
    )
    device_passwords: list[str] = setting(
        [],
        "'name=password' per MQTT device: it logs in as user <name> (brokers whose ACL lets "
        "each equipment user publish under its own name only); a device not listed logs in "
        "as mqtt_url's user",
        secret=True,
    )
    rpc_tokens: list[str] = setting(
        [],
        "'name=token' per RPC device: the token it proves its name with (an RPC server with "
        "device_auth 'token')",
        secret=True,
    )

    def __post_init__(self) -> None:
        for name in ("failure_rate", "qa_fail_rate"):
            if getattr(self, name) > 1:
                raise ValueError(f"{name}: expected a share between 0 and 1")
        names = self.equipment
        for name in names:
            check_topic_level("equipment", name)
        check_topic_prefix("topic_prefix", self.topic_prefix)
        if len(set(names)) != len(names):
            raise ValueError(
                f"positioner, tightener, camera, clamp, nutrunners: names must differ, got {names}"
            )
        if self.rpc_port > 65535:
            raise ValueError(f"rpc_port: expected a TCP port (1..65535), got {self.rpc_port}")
        for name in self.rpc_devices:
            if name not in names:
                raise ValueError(
                    f"rpc_devices: {name!r} is not a simulated device (have: {', '.join(names)})"
                )
        _per_device("device_passwords", self.device_passwords, names)
        _per_device("rpc_tokens", self.rpc_tokens, names)

    @property
    def passwords(self) -> dict[str, str]:
        """``device_passwords`` by device name."""
        return _per_device("device_passwords", self.device_passwords, self.equipment)

    @property
    def tokens(self) -> dict[str, str]:
        """``rpc_tokens`` by device name."""
        return _per_device("rpc_tokens", self.rpc_tokens, self.equipment)

    @property
    def equipment(self) -> list[str]:
        """The names of the simulated equipment (the ones not switched off)."""
        named = (self.positioner, self.tightener, self.camera, self.clamp, *self.nutrunners)
        return [name for name in named if name]

    @property
    def mqtt_devices(self) -> list[str]:
        """The names of the simulated equipment that speaks MQTT (all but ``rpc_devices``)."""
        return [name for name in self.equipment if name not in self.rpc_devices]

    @property
    def heartbeat_timeout_seconds(self) -> float:
        return 3 * self.heartbeat_seconds


def _per_device(key: str, entries: list[str], devices: list[str]) -> dict[str, str]:
    """``name=value`` entries by device name; the error never shows a value (they are secret)."""
    values: dict[str, str] = {}
    for index, entry in enumerate(entries):
        name, separator, value = entry.partition("=")
        if not separator or not value:
            raise ValueError(f"{key}: entry {index + 1} is not 'name=value'")
        if name not in devices:
            raise ValueError(f"{key}: {name!r} is not a simulated device")
        values[name] = value
    return values
