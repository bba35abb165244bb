"""The engine's Lua scripts: every change of a job's execution state is one of these.

Values travel as arguments and JSON decoded by cjson: nothing is spliced into a script.
"""

from __future__ import annotations

# Compare-and-swap of one job's execution state, with everything that must happen with it.
# KEYS: exec doc, work stream, timers, waiting, active. ARGV[1]: the version the caller read
# (-1: create, the doc must not exist); ARGV[2]: the new doc; ARGV[3]: JSON of the follow-ups.
# Values travel as arguments and JSON decoded by cjson: nothing is spliced into the script.
COMMIT = """
local current = redis.call('GET', KEYS[1])
local expected = tonumber(ARGV[1])
if expected < 0 then
  if current then return 0 end
elseif not current or tonumber(cjson.decode(current)['version']) ~= expected then
  return 0
end
local ops = cjson.decode(ARGV[3])
if ops['ttl'] > 0 then
  redis.call('SET', KEYS[1], ARGV[2], 'EX', ops['ttl'])
else
  redis.call('SET', KEYS[1], ARGV[2])
end
for _, entry in ipairs(ops['work']) do
  redis.call('XADD', KEYS[2], '*', unpack(entry))
end
for _, timer in ipairs(ops['timers']) do
  redis.call('ZADD', KEYS[3], timer[1], timer[2])
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
return 1
"""

# Move due timers to the work stream; ZREM decides which instance moves each one.
FIRE_TIMERS = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local moved = 0
for _, member in ipairs(due) do
  if redis.call('ZREM', KEYS[1], member) == 1 then
    local timer = cjson.decode(member)
    redis.call('XADD', KEYS[2], '*', 'kind', 'timer', 'job', timer['job'], 'timer', member)
    moved = moved + 1
  end
end
return moved
"""
