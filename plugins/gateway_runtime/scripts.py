"""The engine's Lua scripts: every change of a job's execution state is one of these.

Values travel as arguments and JSON decoded by cjson: nothing is spliced into a script.
"""

from __future__ import annotations

# Compare-and-swap of one job's execution state, with everything that must happen with it.
# KEYS: exec doc, work stream, timers, waiting, active, outbox, kept events, recipe snapshot,
# history.
# ARGV[1]: the version the caller read (-1: create: no doc may exist but an ended one of
# another run, i.e. of an earlier job of the same id, cleared and stored again: a start handled
# twice must not run its job again); ARGV[2]: the new doc; ARGV[3]: JSON of the follow-ups:
# ``work`` entries, ``cancel`` timers of tries that ended, new ``timers``, the ``done`` tries
# whose outbox entries go, the ``outbox`` entries of the commands to send now, ``take``: the
# kept event this change applies, if any, and ``history``: the actions done since the last
# write ([name, JSON]), moved out of the doc into the history;
# ARGV[4] (create): the job's recipe snapshot, written with its first state (a state never
# lacks its recipe, and a snapshot never outlives a start that failed) in place of the earlier
# job's, whose history goes too; (else, when not empty) the snapshot an edit of the job's
# steps made, written with the state that runs it; ARGV[5]: the run of the state written (a
# job id stored again starts a new run, its versions from 0: the version alone could match the
# earlier run's).
#
# ``ttl`` > 0 (the job has ended): the state expires after that many seconds, and the recipe
# snapshot and the history with it (the operator view shows them until then).
#
# A start and an end do the job's bookkeeping in the same call (ops fields absent: none), with
# KEYS[10..13]: the job's breakpoints, its Work Master's breakpoints, the parked jobs, the job's
# parking (``gateway_runtime.breakpoints``):
# - create, ``earlier``: the run whose ended state the caller numbered the tries on ("" none); a
#   stored state of another run that has not ended answers -2 (the start is tried again once it
#   has), one of a run other than ``earlier`` -3 (read it, and build on it); ``marks``: the
#   breakpoints the caller gave the state, -4 when the stored ones (both sets) differ (read them,
#   and start again); the job is parked no more.
# - ``forget`` (the state ends): the job's own breakpoints and parking go, and the events kept
#   for it (``job_order_id``), which no job can take any more: answers {1, events dropped}.
#
# Returns 1 written, 0 the version (or run) was not the one read, -1 the kept event to take is
# gone (another job took it first): nothing is written but on 1. Taking a kept event in the
# same script that applies it is what makes it impossible to lose one between the two, or to
# apply one twice.
#
# The stored version and run are read off the document's head (``dump_execution`` writes
# scope, job, version and run first; a quote inside a JSON string is escaped, so the pattern
# cannot match inside one) rather than by decoding the whole document on every step; a scope,
# job or run with a quote in it (escaped, so the pattern does not match) is decoded.
COMMIT = """
local current = redis.call('GET', KEYS[1])
local expected = tonumber(ARGV[1])
local ops
if expected < 0 then
  ops = cjson.decode(ARGV[3])
  local earlier = ops['earlier']
  if current then
    local document = cjson.decode(current)
    if document['run'] == ARGV[5] then return 0 end
    if document['status'] ~= 'ended' then
      if earlier then return -2 end
      return 0
    end
    if earlier and document['run'] ~= earlier then return -3 end
  end
  if ops['marks'] then
    local wanted = {}
    for _, mark in ipairs(ops['marks']) do wanted[mark] = true end
    local stored = redis.call('SUNION', KEYS[10], KEYS[11])
    if #stored ~= #ops['marks'] then return -4 end
    for _, mark in ipairs(stored) do
      if not wanted[mark] then return -4 end
    end
    redis.call('SREM', KEYS[12], ops['job'])
  end
else
  if not current then return 0 end
  local version, run = string.match(
    current, '^{"scope":"[^"]*","job":"[^"]*","version":(%-?%d+),"run":"([^"]*)"[,}]')
  if version == nil then
    local document = cjson.decode(current)
    version, run = document['version'], document['run']
  end
  if tonumber(version) ~= expected or run ~= ARGV[5] then return 0 end
end
ops = ops or cjson.decode(ARGV[3])
if ops['take'] and redis.call('LREM', KEYS[7], 1, ops['take']) == 0 then return -1 end
if expected < 0 then
  redis.call('SET', KEYS[8], ARGV[4])
  redis.call('DEL', KEYS[9])
elseif ARGV[4] ~= '' then
  redis.call('SET', KEYS[8], ARGV[4])
end
for _, entry in ipairs(ops['history']) do
  redis.call('HSET', KEYS[9], entry[1], entry[2])
end
if ops['ttl'] > 0 then
  redis.call('SET', KEYS[1], ARGV[2], 'EX', ops['ttl'])
  redis.call('EXPIRE', KEYS[8], ops['ttl'])
  redis.call('EXPIRE', KEYS[9], ops['ttl'])
else
  redis.call('SET', KEYS[1], ARGV[2])
end
for _, entry in ipairs(ops['work']) do
  redis.call('XADD', KEYS[2], '*', unpack(entry))
end
if #ops['cancel'] > 0 then
  redis.call('ZREM', KEYS[3], unpack(ops['cancel']))
end
for _, timer in ipairs(ops['timers']) do
  redis.call('ZADD', KEYS[3], timer[1], timer[2])
end
if #ops['done'] > 0 then
  redis.call('ZREM', KEYS[6], unpack(ops['done']))
end
for _, entry in ipairs(ops['outbox']) do
  redis.call('ZADD', KEYS[6], entry[1], entry[2])
end
if ops['waiting'] then
  redis.call('ZADD', KEYS[4], 'NX', ops['now'], ops['job'])
else
  redis.call('ZREM', KEYS[4], ops['job'])
end
if ops['active'] then
  redis.call('SADD', KEYS[5], ops['job'])
else
  redis.call('SREM', KEYS[5], ops['job'])
end
if ops['forget'] then
  redis.call('DEL', KEYS[10], KEYS[13])
  redis.call('SREM', KEYS[12], ops['job'])
  local dropped = 0
  for _, text in ipairs(redis.call('LRANGE', KEYS[7], 0, -1)) do
    local ok, event = pcall(cjson.decode, text)
    if ok and type(event) == 'table' and event['job_order_id'] == ops['job'] then
      dropped = dropped + redis.call('LREM', KEYS[7], 1, text)
    end
  end
  return {1, dropped}
end
return 1
"""

# What is due in one scope, moved to its work stream in one call. KEYS: timers, outbox, work.
# ARGV: now, most of each kind to move.
# - Due timers (their due time with them); ZREM decides which instance moves each one.
# - Commands committed but not confirmed sent within their grace time (the instance that
#   committed them died before publishing, or is stuck): "send" entries, which any instance
#   sends again if their try is still outstanding. Outbox members are JSON
#   ``[job, action, attempt]``.
# Returns {moved, the earliest due time left of either set ("" none), as a string: Lua numbers
# come back as integers}.
FIRE_DUE = """
local now, limit = ARGV[1], tonumber(ARGV[2])
local moved = 0
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
for index = 1, #due, 2 do
  local member = due[index]
  if redis.call('ZREM', KEYS[1], member) == 1 then
    local timer = cjson.decode(member)
    redis.call('XADD', KEYS[3], '*', 'kind', 'timer', 'job', timer['job'], 'timer', member,
      'due', due[index + 1])
    moved = moved + 1
  end
end
local unsent = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, limit)
for _, member in ipairs(unsent) do
  if redis.call('ZREM', KEYS[2], member) == 1 then
    local try = cjson.decode(member)
    redis.call('XADD', KEYS[3], '*', 'kind', 'send', 'job', try[1], 'action', try[2],
      'attempt', tostring(try[3]))
    moved = moved + 1
  end
end
local next_due = ''
for index = 1, 2 do
  local first = redis.call('ZRANGE', KEYS[index], 0, 0, 'WITHSCORES')
  if first[2] and (next_due == '' or tonumber(first[2]) < tonumber(next_due)) then
    next_due = first[2]
  end
end
return {moved, next_due}
"""

# A work entry handled: acknowledged and deleted at once (one call, not MULTI/XACK/XDEL/EXEC).
# KEYS: work stream. ARGV: consumer group, entry id.
ACKNOWLEDGE = """
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return redis.call('XDEL', KEYS[1], ARGV[2])
"""
