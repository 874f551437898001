-- fence: store the fencing token ARGV[2] of the acquisition of ARGV[1]
-- while ARGV[1] holds KEYS[1] on this node, so that every later grant on
-- this node reads a counter at least as large.
-- KEYS[1] lock hash, KEYS[2] fence counter.
-- The counter expires once this node's clock is past it (24 hours from
-- the write, or later if it is ahead of the clock: see retention), so that
-- a name locked once does not stay on every node forever. A grant that
-- finds it gone reads a clock past every fence it held, and the fence is
-- at least that clock (docs/safety.md, Fencing over Redlock).
-- Returns 1 when stored, 0 when the token does not hold the lock here, -1
-- when the counter is already at least ARGV[2] (never expected: the fence
-- was computed from this node's counter while the token held the lock).

-- at_least reports whether the counter c is at least the fence f (a
-- decimal integer), exactly: past 2^53 doubles do not hold every integer,
-- and read as doubles two fences one apart can compare equal.
local function at_least(c, f)
  if string.match(c, '^[1-9]%d*$') then
    if #c ~= #f then return #c > #f end
    return c >= f
  end
  local n = tonumber(c)
  return n ~= nil and n >= tonumber(f)
end

-- RETENTION_MS is how long a counter lives when its fence is not ahead of
-- the clock.
local RETENTION_MS = 86400000

-- retention is how long the counter at fence f lives: RETENTION_MS, and
-- at least a second past the moment this node's clock reaches f.
local function retention(f)
  local t = redis.call('TIME')
  local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local gap = math.ceil((tonumber(f) - now_us) / 1000)
  return string.format('%.0f', math.max(RETENTION_MS, gap + 1000))
end

if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
-- Our own request delivered twice (a client-side retry): already stored.
if redis.call('HGET', KEYS[1], ':fence') == ARGV[2] then return 1 end
local cur = redis.call('GET', KEYS[2])
if cur and at_least(cur, ARGV[2]) then return -1 end
redis.call('SET', KEYS[2], ARGV[2], 'PX', retention(ARGV[2]))
redis.call('HSET', KEYS[1], ':fence', ARGV[2])
return 1
