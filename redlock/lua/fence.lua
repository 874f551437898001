-- fence: store the fencing token ARGV[2] of the acquisition of ARGV[1]
-- while ARGV[1] holds KEYS[1] on this node, so that every later grant on
-- this node reads a counter at least as large.
-- KEYS[1] lock hash, KEYS[2] fence counter.
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

if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
-- Our own request delivered twice (a client-side retry): already stored.
if redis.call('HGET', KEYS[1], ':fence') == ARGV[2] then return 1 end
local cur = redis.call('GET', KEYS[2])
if cur and at_least(cur, ARGV[2]) then return -1 end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('HSET', KEYS[1], ':fence', ARGV[2])
return 1
