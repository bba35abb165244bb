"""A scope transaction's commit as one script call: its guards are checked, then its writes run.

A ``RedisScopeTransaction`` collects its writes here instead of sending them one by one (MULTI,
each command, EXEC), and sends them as **one** ``EVALSHA``: one command per commit, whatever it
writes. The script first checks the guards, and writes nothing if one fails:

- ``v``: the string at a key is still the text the transaction decided on (its SHA-1, ``''``:
  the key holds nothing). This is what WATCH gave: another instance's change to a key read
  since (or to a key whose text the caller remembered, see ``known``) fails the commit;
- ``n``: a sorted set still has fewer members than a limit (a job limit concurrent Stores must
  not overshoot, checked where the count cannot change before the write).

Every key the script touches is passed in ``KEYS`` (they are of one scope: one hash slot, so
it runs unchanged on Redis Cluster). A write that is itself a script (the queue's ``ENQUEUE``)
is inlined as a Lua function of the composed script, called with its own ``KEYS`` and ``ARGV``:
scripts cannot call ``EVAL``.

``ARGV`` layout: the number of guards, then per guard ``kind, key, expected``; then per write
``n, name, arg1 .. arg(n-1)`` where ``name`` is a Redis command, or ``@<i>`` (the i-th inlined
script) followed by its key count, its keys and its arguments.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

_PRELUDE = "local scripts = {}\n"

_BODY = """
local i = 2
for _ = 1, tonumber(ARGV[1]) do
  local kind, key, expected = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  i = i + 3
  local holds
  if kind == 'v' then
    local text = redis.call('GET', key)
    holds = (text and redis.sha1hex(text) or '') == expected
  else
    holds = redis.call('ZCARD', key) < tonumber(expected)
  end
  if not holds then return {0, key} end
end
while i <= #ARGV do
  local n, name = tonumber(ARGV[i]), ARGV[i + 1]
  if string.sub(name, 1, 1) == '@' then
    local count = tonumber(ARGV[i + 2])
    scripts[tonumber(string.sub(name, 2))](
      {unpack(ARGV, i + 3, i + 2 + count)}, {unpack(ARGV, i + 3 + count, i + n)})
  else
    redis.call(unpack(ARGV, i + 1, i + n))
  end
  i = i + n + 1
end
return {1}
"""


def digest(text: str | None) -> str:
    """What a value guard compares: the SHA-1 of the text, ``''`` for no value."""
    return "" if text is None else hashlib.sha1(text.encode()).hexdigest()


class Batch:
    """Guards and writes collected for one commit."""

    def __init__(self) -> None:
        self.keys: dict[str, None] = {}  # every key touched, in order (KEYS)
        self.guards: list[str] = []
        self.writes: list[str] = []
        self.scripts: list[str] = []  # inlined script bodies, by first use

    @property
    def empty(self) -> bool:
        return not self.writes

    @property
    def guarded(self) -> bool:
        return bool(self.guards)

    def same_text(self, key: str, text: str | None) -> None:
        """Commit only if ``key`` still holds ``text`` (``None``: nothing)."""
        self.keys[key] = None
        self.guards += ["v", key, digest(text)]

    def fewer_than(self, key: str, limit: int) -> None:
        """Commit only if the sorted set at ``key`` has fewer than ``limit`` members."""
        self.keys[key] = None
        self.guards += ["n", key, str(limit)]

    def command(self, name: str, keys: Iterable[str], *args: Any) -> None:
        """``name keys... args...`` (its keys first, as most commands take them)."""
        keys = list(keys)
        self.keys.update(dict.fromkeys(keys))
        words = [name, *keys, *(_word(arg) for arg in args)]
        self.writes += [str(len(words)), *words]

    def command_at(self, name: str, key: str, *args: Any) -> None:
        self.command(name, [key], *args)

    def script(self, body: str, keys: Iterable[str], args: Iterable[Any]) -> None:
        """A script's effect, inlined: ``body`` runs as a function of its ``KEYS``, ``ARGV``."""
        if body not in self.scripts:
            self.scripts.append(body)
        keys, words = list(keys), [_word(arg) for arg in args]
        self.keys.update(dict.fromkeys(keys))
        name = f"@{self.scripts.index(body) + 1}"
        self.writes += [str(len(keys) + len(words) + 2), name, str(len(keys)), *keys, *words]

    def source(self) -> str:
        """The script's text: the same for every batch with the same inlined scripts."""
        functions = "".join(
            f"scripts[{number}] = function(KEYS, ARGV)\n{body}\nend\n"
            for number, body in enumerate(self.scripts, start=1)
        )
        return _PRELUDE + functions + _BODY

    def arguments(self) -> tuple[list[str], list[str]]:
        """``KEYS`` and ``ARGV`` of the call."""
        return list(self.keys), [str(len(self.guards) // 3), *self.guards, *self.writes]


def _word(value: Any) -> str:
    if isinstance(value, bool):
        raise TypeError("a Redis argument cannot be a bool")
    if isinstance(value, bytes):
        return value.decode()
    return str(value)


class Writes:
    """What ``ScopeTransaction.pipeline`` is on Redis: the write commands a scope transaction
    may queue, collected into its ``Batch`` (redis-py's names and arguments).

    ``check`` refuses a key of another scope; ``wrote`` hears what a key holds after a SET or
    DEL, so the transaction knows what its commit leaves (``RedisScopeTransaction.texts``).
    """

    def __init__(
        self,
        batch: Batch,
        check: Callable[[str], None],
        wrote: Callable[[str, str | None], None],
    ) -> None:
        self._batch = batch
        self._check = check
        self._wrote = wrote

    def _keys(self, *keys: str) -> list[str]:
        for key in keys:
            self._check(key)
        return list(keys)

    def set(self, name: str, value: str, ex: int | None = None) -> None:
        self._keys(name)
        extra = () if ex is None else ("EX", ex)
        self._batch.command_at("SET", name, value, *extra)
        self._wrote(name, value)

    def delete(self, *names: str) -> None:
        self._batch.command("DEL", self._keys(*names))
        for name in names:
            self._wrote(name, None)

    def expire(self, name: str, time: int) -> None:
        self._batch.command_at("EXPIRE", self._keys(name)[0], time)

    def sadd(self, name: str, *values: Any) -> None:
        self._batch.command_at("SADD", self._keys(name)[0], *values)

    def srem(self, name: str, *values: Any) -> None:
        self._batch.command_at("SREM", self._keys(name)[0], *values)

    def zadd(self, name: str, mapping: Mapping[str, float]) -> None:
        pairs = [word for member, score in mapping.items() for word in (score, member)]
        self._batch.command_at("ZADD", self._keys(name)[0], *pairs)

    def zrem(self, name: str, *values: Any) -> None:
        self._batch.command_at("ZREM", self._keys(name)[0], *values)

    def hset(
        self,
        name: str,
        key: str | None = None,
        value: Any = None,
        mapping: Mapping[str, Any] | None = None,
    ) -> None:
        pairs = [] if key is None else [key, value]
        pairs += [word for item in (mapping or {}).items() for word in item]
        self._batch.command_at("HSET", self._keys(name)[0], *pairs)

    def hdel(self, name: str, *keys: str) -> None:
        self._batch.command_at("HDEL", self._keys(name)[0], *keys)

    def xadd(
        self,
        name: str,
        fields: Mapping[str, Any],
        id: str = "*",  # redis-py's name
        maxlen: int | None = None,
        approximate: bool = True,
    ) -> None:
        trim = () if maxlen is None else ("MAXLEN", "~" if approximate else "=", maxlen)
        pairs = [word for item in fields.items() for word in item]
        self._batch.command_at("XADD", self._keys(name)[0], *trim, id, *pairs)

    def eval(self, script: str, numkeys: int, *keys_and_args: Any) -> None:
        """The script's effect, inlined into the commit's (scripts cannot call EVAL)."""
        keys = self._keys(*(str(key) for key in keys_and_args[:numkeys]))
        self._batch.script(script, keys, keys_and_args[numkeys:])
