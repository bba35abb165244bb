"""The Redis store against a real redis-server: connection, documents, transactions, discovery."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import Connection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError, WatchError

from gateway.changes import ChangeRecord, Trigger
from gateway.errors import GatewayError
from gateway.jobstates import JobState
from gateway.store import GLOBAL_SCOPE, STORE_SCHEMA, Store
from gateway.testing.cli import command_environ, run_gateway
from gateway.testing.redis_ha import packets_sent
from gateway.testing.services import ServerProcess, free_port, redis_server, running
from gateway_redis import RedisStore

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

SERVER_PASSWORD = "right-horse-battery"
StoreFactory = Callable[..., RedisStore]  # the ``store_factory`` fixture


@pytest.fixture
def password_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A private redis-server that requires a password."""
    server = redis_server(tmp_path)
    server.command += ["--requirepass", SERVER_PASSWORD]
    with running(server):
        yield server


# -- connection ------------------------------------------------------------------------------


async def test_the_hook_builds_a_store_that_connects_and_pings(
    store_factory: StoreFactory,
) -> None:
    store: Store = store_factory()
    assert await store.ping() is False  # not entered yet
    async with store as entered:
        assert entered is store
        assert await store.ping() is True
        assert await store.client.ping()
    assert await store.ping() is False
    with pytest.raises(GatewayError, match="not entered"):
        _ = store.client


async def test_more_concurrent_work_than_connections_waits_instead_of_failing(
    store_factory: StoreFactory, unique: str
) -> None:
    """200 jobs at once must not exhaust the pool (redis-py's default pool raises
    MaxConnectionsError): work beyond ``redis.max_connections`` waits for a free connection."""
    async with store_factory(max_connections="4") as store:
        done = 0

        async def blocking_read(number: int) -> None:
            nonlocal done
            # Holds its connection for the whole block, as the engine's stream reads do.
            await store.client.blpop([f"{unique}:nothing:{number}"], timeout=0.1)
            done += 1

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tasks:
                for number in range(40):
                    tasks.start_soon(blocking_read, number)
        client: object = store.client  # a RedisCluster on a Cluster, whatever it is typed as
        if isinstance(client, RedisCluster):  # bounded per client (and so per node)
            assert all(len(node._connections) <= 4 for node in client.get_nodes())
        else:
            assert store.client.connection_pool.max_connections == 4
    assert done == 40


async def test_wrong_password_stops_start_up_without_showing_it(
    password_server: ServerProcess, store_factory: StoreFactory
) -> None:
    url = f"redis://127.0.0.1:{password_server.port}/0"
    with pytest.raises(GatewayError) as caught:
        async with store_factory(url=url, password="wrong-password-123"):
            pass
    message = str(caught.value)
    assert f"cannot connect to Redis at {url}" in message
    assert "wrong-password-123" not in message


async def test_a_password_in_the_url_is_masked_in_the_error(
    password_server: ServerProcess, store_factory: StoreFactory
) -> None:
    url = f"redis://:not-the-one@127.0.0.1:{password_server.port}/0"
    with pytest.raises(GatewayError) as caught:
        async with store_factory(url=url):
            pass
    assert f"redis://:********@127.0.0.1:{password_server.port}/0" in str(caught.value)
    assert "not-the-one" not in str(caught.value)


async def test_no_password_is_refused_and_the_right_one_connects(
    password_server: ServerProcess, store_factory: StoreFactory
) -> None:
    url = f"redis://127.0.0.1:{password_server.port}/0"
    with pytest.raises(GatewayError, match="cannot connect"):
        async with store_factory(url=url):
            pass
    async with store_factory(url=url, password=SERVER_PASSWORD) as store:
        assert await store.ping()


async def test_a_store_of_another_schema_stops_start_up_saying_what_to_do(
    store_factory: StoreFactory, unique: str
) -> None:
    async with store_factory() as store:  # a new store gets this version's schema
        assert await store.client.get(store.keys.schema()) == str(STORE_SCHEMA)
        await store.client.set(store.keys.schema(), "1")
    with pytest.raises(GatewayError, match=f"store schema 1 under key prefix '{unique}'"):
        async with store_factory():
            pass


async def test_a_store_from_before_the_schema_key_is_refused(store_factory: StoreFactory) -> None:
    async with store_factory() as store:
        await store.client.delete(store.keys.schema())
        await store.client.sadd(store.keys.scopes(), "cell1")  # what that version left
    with pytest.raises(GatewayError, match=f"this gateway writes schema {STORE_SCHEMA}"):
        async with store_factory():
            pass


async def test_unreachable_server_is_named(store_factory: StoreFactory) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nobody listens there
    with pytest.raises(GatewayError, match=f"cannot connect to Redis at {url}"):
        async with store_factory(url=url, connect_timeout_seconds="0.5"):
            pass


def test_an_unreachable_redis_at_start_names_the_setting_and_its_origin() -> None:
    """One line: the server, the reason, the key and where its value came from."""
    url = f"redis://127.0.0.1:{free_port()}/0"
    environ = command_environ(
        GATEWAY_REDIS_URL=url, GATEWAY_MQTT_URL=f"mqtt://127.0.0.1:{free_port()}"
    )
    done = run_gateway("run", environ=environ)
    assert done.returncode != 0
    last = done.stderr.splitlines()[-1]
    assert last.startswith(f"gateway: cannot connect to Redis at {url}: ")
    assert last.endswith("(redis.url from environment GATEWAY_REDIS_URL)")
    assert "Traceback" not in done.stderr


async def test_ping_reports_a_lost_server_without_raising(
    tmp_path: Path, store_factory: StoreFactory
) -> None:
    with running(redis_server(tmp_path)) as server:
        url = f"redis://127.0.0.1:{server.port}/0"
        async with store_factory(url=url, connect_timeout_seconds="0.5") as store:
            assert await store.ping() is True
            server.stop()
            with anyio.fail_after(3):
                assert await store.ping() is False


# -- documents -------------------------------------------------------------------------------


async def test_json_documents_are_compact_strings_with_optional_ttl(store: RedisStore) -> None:
    key = store.keys.scoped("cell-1", "doc")
    assert await store.get_json(key) is None
    await store.set_json(key, {"JobOrderID": "J1", "Count": 2, "Tags": ["ä", None]})
    assert await store.get_json(key) == {"JobOrderID": "J1", "Count": 2, "Tags": ["ä", None]}
    assert await store.client.get(key) == '{"JobOrderID":"J1","Count":2,"Tags":["ä",null]}'
    await store.set_json(key, [1], ttl_seconds=60)
    assert 0 < await store.client.ttl(key) <= 60


# -- transactions ----------------------------------------------------------------------------


async def test_state_and_change_record_commit_together(store: RedisStore) -> None:
    key = store.keys.scoped("cell-1", "job", "J1")
    async with store.transaction("cell-1") as tx:
        tx.set_json(key, {"State": "Ready"})
        tx.pipeline.sadd(store.keys.scoped("cell-1", "jobs"), "J1")
        tx.append_change(a_change(tx.scope, "Store"))
        assert await store.get_json(key) is None  # queued, not yet written
    assert await store.get_json(key) == {"State": "Ready"}
    assert await store.client.smembers(store.keys.scoped("cell-1", "jobs")) == {"J1"}
    [record] = await stream_records(store, store.keys.changes("cell-1"))
    assert record["change_type"] == "Store"
    assert record["job_order_id"] == "J1"
    assert record["ts"].endswith("Z")


def a_change(scope: str, trigger: str = "Store") -> ChangeRecord:
    """A change record of job J1 in ``scope``, as job management appends with its writes."""
    state = JobState.NOT_ALLOWED_TO_START_READY
    return ChangeRecord(Trigger(trigger), scope, "J1", state, JobState.INITIAL, 0, False)


async def stream_records(store: RedisStore, key: str) -> list[dict[str, str]]:
    """The records of a stream, as the store's text-decoding client returns them."""
    entries: list[tuple[str, dict[str, str]]] = await store.client.xrange(key)  # type: ignore[assignment]
    return [record for _, record in entries]


async def test_an_exception_in_the_block_writes_nothing(store: RedisStore) -> None:
    key = store.keys.scoped("cell-1", "job", "J1")

    async def write_then_fail() -> None:
        async with store.transaction("cell-1") as tx:
            tx.set_json(key, {"State": "Ready"})
            tx.append_change(a_change(tx.scope, "Store"))
            raise RuntimeError("handler bug")

    with pytest.raises(RuntimeError, match="handler bug"):
        await write_then_fail()
    assert await store.get_json(key) is None
    assert await store.client.xlen(store.keys.changes("cell-1")) == 0
    assert await store.known_scopes() == set()


async def test_a_concurrent_change_to_a_watched_key_fails_the_commit(store: RedisStore) -> None:
    key = store.keys.scoped("cell-1", "job", "J1")
    await store.set_json(key, {"State": "Ready", "Version": 1})

    async def start_job() -> None:
        async with store.transaction("cell-1", watch=[key]) as tx:
            current = await tx.get_json(key)
            await store.set_json(key, {"State": "Aborted", "Version": 2})  # another instance
            tx.set_json(key, {**current, "State": "Running"})
            tx.append_change(a_change(tx.scope, "Start"))

    with pytest.raises(WatchError):
        await start_job()
    assert await store.get_json(key) == {"State": "Aborted", "Version": 2}
    assert await store.client.xlen(store.keys.changes("cell-1")) == 0


async def test_an_unchanged_watched_key_commits_after_reading_it(store: RedisStore) -> None:
    key = store.keys.scoped("cell-1", "job", "J1")
    await store.set_json(key, {"State": "Ready"})
    async with store.transaction("cell-1", watch=[key]) as tx:
        current = await tx.get_json(key)
        tx.set_json(key, {**current, "State": "Running"})
        tx.append_change(a_change(tx.scope, "Start"))
        assert await tx.get_json(key) == {"State": "Ready"}  # reads do not see queued writes
    assert await store.get_json(key) == {"State": "Running"}


async def test_a_commit_is_one_script_call_after_one_read_of_the_watched_keys(
    store: RedisStore,
) -> None:
    job = store.keys.scoped("cell-1", "job", "J1")
    response = store.keys.scoped("cell-1", "jobresponse", "J1")
    await store.set_json(job, {"State": "Ready"})
    with packets_sent() as in_transaction:
        async with store.transaction("cell-1", watch=[job, response]) as tx:
            assert await tx.get_json_many([job, response]) == [{"State": "Ready"}, None]
            assert await tx.get_json(job) == {"State": "Ready"}
            tx.set_json(job, {"State": "Running"})
            tx.pipeline.sadd(store.keys.scoped("cell-1", "jobs"), "J1")
            tx.append_change(a_change(tx.scope, "Start"))
    assert await store.get_json(job) == {"State": "Running"}
    assert await store.client.smembers(store.keys.scoped("cell-1", "jobs")) == {"J1"}
    assert await store.client.xlen(store.keys.changes("cell-1")) == 1
    commits = [p for p in in_transaction if b"EVAL" in p and b"scope-discoveries" not in p]
    assert len(commits) == 1, in_transaction  # MULTI ... EXEC around it on a Cluster only
    assert not any(b"WATCH" in packet for packet in in_transaction)
    assert b"MGET" in in_transaction[0]


async def test_known_texts_are_not_read_and_the_commit_is_one_command(store: RedisStore) -> None:
    job = store.keys.scoped("cell-1", "job", "J1")
    await store.client.set(job, '{"State":"Ready"}')
    with packets_sent() as sent:
        async with store.transaction("cell-1", watch=[job], known={job: '{"State":"Ready"}'}) as tx:
            assert await tx.get_json(job) == {"State": "Ready"}
            tx.set_json(job, {"State": "Running"})
            assert tx.texts == {job: '{"State":"Running"}'}  # what the commit leaves
    assert await store.get_json(job) == {"State": "Running"}
    if not isinstance(cast(object, store.client), RedisCluster):
        assert len(sent) == 1, sent
        assert b"EVALSHA" in sent[0]


async def test_a_stale_known_text_fails_the_commit_and_writes_nothing(store: RedisStore) -> None:
    job = store.keys.scoped("cell-1", "job", "J1")
    await store.client.set(job, '{"State":"Aborted"}')  # another instance changed it

    async def start_job(believed: str | None) -> None:
        async with store.transaction("cell-1", watch=[job], known={job: believed}) as tx:
            tx.set_json(job, {"State": "Running"})
            tx.append_change(a_change(tx.scope, "Start"))

    with pytest.raises(WatchError, match="changed"):
        await start_job('{"State":"Ready"}')
    with pytest.raises(WatchError):  # believed empty, but it holds something
        await start_job(None)
    assert await store.client.get(job) == '{"State":"Aborted"}'
    assert await store.client.xlen(store.keys.changes("cell-1")) == 0


async def test_a_commit_whose_reply_is_lost_is_not_sent_again(
    store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server ran the commit, the reply never came (a connection lost): sent again, a
    commit could apply twice; it fails with ``WatchError`` instead, and a read shows it."""
    job = store.keys.scoped("cell-1", "job", "J1")
    await store.client.set(job, '{"State":"Ready"}')
    read = Connection.read_response
    lost: list[bool] = []

    async def reply_lost(self: Connection, *args: Any, **kwargs: Any) -> Any:
        reply = await read(self, *args, **kwargs)
        # The commit's own reply (in EXEC's on a Cluster); a failed guard's is [0, key].
        if not lost and reply in ([1], [[1]]):
            lost.append(True)
            raise RedisConnectionError("connection lost while reading the reply")
        return reply

    async def start_job() -> None:
        async with store.transaction("cell-1", watch=[job]) as tx:
            tx.set_json(job, {"State": "Running"})
            tx.append_change(a_change(tx.scope, "Start"))

    monkeypatch.setattr(Connection, "read_response", reply_lost)
    with pytest.raises(WatchError, match="may or may not have happened"):
        await start_job()
    monkeypatch.undo()
    assert lost
    assert await store.get_json(job) == {"State": "Running"}
    assert await store.client.xlen(store.keys.changes("cell-1")) == 1  # once


async def test_a_count_guard_refuses_the_commit_at_the_limit(store: RedisStore) -> None:
    jobs = store.keys.scoped("cell-1", "jobs")
    await store.client.zadd(jobs, {"J1": 0, "J2": 0})

    async def add(job: str) -> None:
        async with store.transaction("cell-1") as tx:
            tx.require_fewer(jobs, 3)
            tx.pipeline.zadd(jobs, {job: 0})

    await add("J3")
    with pytest.raises(WatchError):
        await add("J4")
    assert await store.client.zcard(jobs) == 3


async def test_a_script_queued_in_a_transaction_runs_within_its_commit(store: RedisStore) -> None:
    counter = store.keys.scoped("cell-1", "counter")
    listed = store.keys.scoped("cell-1", "listed")
    add = "redis.call('INCRBY', KEYS[1], ARGV[1])\nif ARGV[2] == 'x' then return 0 end\nreturn 1"
    for _ in range(2):  # the same composed script, run again
        async with store.transaction("cell-1") as tx:
            tx.pipeline.eval(add, 1, counter, 5, "x")
            tx.pipeline.hset(listed, "a", "1", mapping={"b": "2"})
            tx.pipeline.eval(add, 1, counter, 1, "y")
            tx.pipeline.expire(listed, 60)
    assert await store.client.get(counter) == "12"
    assert await store.client.hgetall(listed) == {"a": "1", "b": "2"}
    await store.client.script_flush()  # a restarted server: the script is sent in full
    async with store.transaction("cell-1", watch=[counter]) as tx:
        tx.pipeline.eval(add, 1, counter, 1, "y")
    assert await store.client.get(counter) == "13"


async def test_a_watch_on_a_connection_the_server_closed_is_sent_again_on_a_new_one(
    store: RedisStore,
) -> None:
    key = store.keys.scoped("cell-1", "job", "J1")
    await store.set_json(key, {"State": "Ready"})
    await close_connections_serving(store, key)  # the pooled connections, a failover's way
    async with store.transaction("cell-1", watch=[key]) as tx:
        assert await tx.get_json(key) == {"State": "Ready"}
        tx.set_json(key, {"State": "Running"})
    assert await store.get_json(key) == {"State": "Running"}


async def close_connections_serving(store: RedisStore, key: str) -> None:
    """The server closes every connection of the node serving ``key`` (the way a failover
    loses them), the one asking excepted."""
    client: object = store.client  # a RedisCluster on a Cluster, whatever it is typed as
    if isinstance(client, RedisCluster):
        node = client.get_node_from_key(key)
        await client.client_kill_filter(_type="normal", skipme=True, target_nodes=node)
    else:
        await store.client.client_kill_filter(_type="normal", skipme=True)


async def test_a_commit_whose_watching_connection_was_lost_fails_and_writes_nothing(
    store: RedisStore,
) -> None:
    # The WATCH went with the connection: sent again on a new one, the commit would be blind
    # to the change made meanwhile (redis-py's Cluster client did that; see clients.py).
    key = store.keys.scoped("cell-1", "job", "J1")
    await store.set_json(key, {"State": "Ready"})

    async def start_job() -> None:
        async with store.transaction("cell-1", watch=[key]) as tx:
            current = await tx.get_json(key)
            await close_connections_serving(store, key)
            await store.set_json(key, {"State": "Aborted"})  # another instance, meanwhile
            tx.set_json(key, {**current, "State": "Running"})
            tx.append_change(a_change(tx.scope, "Start"))

    with pytest.raises(WatchError):
        await start_job()
    assert await store.get_json(key) == {"State": "Aborted"}
    assert await store.client.xlen(store.keys.changes("cell-1")) == 0


async def test_a_cluster_commit_does_not_reconnect_without_its_watch(store: RedisStore) -> None:
    client: object = store.client
    if not isinstance(client, RedisCluster):
        return  # a Cluster client's own failover handling, checked on a Cluster
    key = store.keys.scoped("cell-1", "job", "J1")
    await store.set_json(key, {"State": "Ready"})

    async def start_job() -> None:
        async with store.transaction("cell-1", watch=[key]) as tx:
            current = await tx.get_json(key)
            # What redis-py does when any command meets CLUSTERDOWN in a failover: it closes
            # every connection of the client, the WATCHing one too, to relearn the slots.
            await client.aclose()
            await store.set_json(key, {"State": "Aborted"})
            tx.set_json(key, {**current, "State": "Running"})

    with pytest.raises(WatchError):
        await start_job()
    assert await store.get_json(key) == {"State": "Aborted"}


async def test_a_transaction_touches_only_its_own_scope(store: RedisStore) -> None:
    with pytest.raises(ValueError, match="does not belong to scope"):
        async with store.transaction("cell-1") as tx:
            tx.set_json(store.keys.scoped("cell-2", "job"), {})
    with pytest.raises(ValueError, match="does not belong to scope"):
        async with store.transaction("cell-1", watch=["elsewhere"]):
            pass
    with pytest.raises(ValueError, match="scope"):
        async with store.transaction("bad{scope}"):
            pass
    with pytest.raises(ValueError, match="reserved"):
        async with store.transaction(GLOBAL_SCOPE) as tx:
            tx.append_change(a_change(tx.scope, "Store"))
    assert await store.client.xlen(store.keys.global_changes()) == 0


# -- scope discovery -------------------------------------------------------------------------


async def test_a_new_scope_is_announced_once(
    store: RedisStore, store_factory: StoreFactory
) -> None:
    async with store.transaction("cell-7") as tx:
        tx.append_change(a_change(tx.scope, "Store"))
    assert await store.known_scopes() == {"cell-7"}
    [announced] = await stream_records(store, store.keys.global_changes())
    assert announced["scope"] == "cell-7"
    assert "ts" in announced

    async with store.transaction("cell-7") as tx:  # this process: no extra round trip
        tx.append_change(a_change(tx.scope, "Start"))
    # Another process: its memory is empty, the set says the scope is known.
    async with store_factory() as other, other.transaction("cell-7") as tx:
        tx.append_change(a_change(tx.scope, "Stop"))
    assert await store.client.xlen(store.keys.global_changes()) == 1
    assert await store.client.xlen(store.keys.changes("cell-7")) == 3


async def test_writes_without_change_records_announce_nothing(store: RedisStore) -> None:
    async with store.transaction("cell-8") as tx:
        tx.set_json(store.keys.scoped("cell-8", "config"), {"MaxJobs": 3})
    assert await store.known_scopes() == set()
    assert await store.client.xlen(store.keys.global_changes()) == 0


async def test_reconcile_registers_a_scope_whose_registration_was_lost(
    store: RedisStore,
) -> None:
    async with store.transaction("cell-1") as tx:
        tx.append_change(a_change(tx.scope, "Store"))
    # A crash between a scope's commit and its registration leaves only the change stream.
    await store.client.xadd(store.keys.changes("line-2/cell-3"), {"change_type": "Store"})
    await store.client.xadd(store.keys.global_key("unrelated", "changes"), {"x": "1"})
    assert await store.known_scopes() == {"cell-1"}
    assert await store.reconcile_scopes() == {"cell-1", "line-2/cell-3"}
    assert await store.known_scopes() == {"cell-1", "line-2/cell-3"}
    assert await store.client.xlen(store.keys.global_changes()) == 2


async def test_read_streams_spans_many_scopes_and_waits_when_there_is_nothing(
    store: RedisStore,
) -> None:
    """Sixty scopes are sixty slots on a Cluster: one call still reads them all (and waits up
    to its block time when none has anything new)."""
    scopes = [f"cell-{number}" for number in range(60)]
    streams = {store.keys.changes(scope): "0-0" for scope in scopes}
    for scope in scopes[::7]:
        await store.client.xadd(store.keys.changes(scope), {"scope": scope})
    batches = await store.read_streams(streams, count=10, block_ms=100)
    assert sorted(stream for stream, _ in batches) == sorted(
        store.keys.changes(scope) for scope in scopes[::7]
    )
    after = {stream: entries[-1][0] for stream, entries in batches}
    started = anyio.current_time()
    assert await store.read_streams({**streams, **after}, block_ms=200) == []
    assert anyio.current_time() - started >= 0.19
    group = ("readers", "reader-1")
    for stream in streams:
        await store.client.xgroup_create(stream, group[0], id="0", mkstream=True)
    taken = await store.read_streams(dict.fromkeys(streams, ">"), group=group)
    assert sum(len(entries) for _, entries in taken) == len(scopes[::7])


async def test_read_streams_raises_a_missing_group_as_the_server_said_it(
    store: RedisStore,
) -> None:
    """Readers recognise NOGROUP by the server's words (to re-create the group), on a
    Cluster's pipelined reads too."""
    stream = store.keys.changes("no-group")
    await store.client.xadd(stream, {"n": "1"})
    with pytest.raises(ResponseError, match=r"^NOGROUP"):
        await store.read_streams({stream: ">"}, group=("nobody", "reader"))
