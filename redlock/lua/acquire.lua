-- acquire: take the lock on this node for ARGV[1] if nobody holds it.
-- KEYS[1] lock hash: owner token -> hold count, plus ':fence', ':meta', ':at'
--         (and ':ext', see extend.lua)
-- KEYS[2] fence counter: the highest fencing token stored on this node
-- ARGV[1] token, ARGV[2] lease ms, ARGV[3] holder metadata (JSON)
-- Returns {1, counter, now_us} when granted (counter is this node's fence
-- counter, now_us its clock in microseconds), or {0, pttl, owner} when
-- another token holds the lock here. A counter of 2^53 or more, past the
-- integers a Lua number (a double) holds exactly, is returned as its
-- decimal string, which the client reads exactly.
-- Reads come first: a key of the wrong type or a corrupt counter fails the
-- script before anything is written. A hash without ':at' is not a lock
-- either (other data at its name; every grant writes ':at' with the token,
-- while ':fence' only comes with fence.lua): it is WRONGTYPE, not a holder
-- to wait for.
local raw = redis.call('GET', KEYS[2]) or '0'
local counter = tonumber(raw)
-- tonumber reads "inf" and "nan" too: no counter either.
if counter and (counter ~= counter or counter == math.huge or counter == -math.huge) then counter = nil end
if not counter then
  -- A value that is not a counter (other data at its name): WRONGTYPE, as
  -- a key of another type is, so that Lock does not wait for it to change.
  return redis.error_reply('WRONGTYPE the fence counter ' .. KEYS[2] .. ' is not a number')
end
if counter >= 2^53 then
  -- Exact only as a decimal integer, and one more must still be an int64.
  if not string.match(raw, '^[1-9]%d*$') or #raw > 19 or (#raw == 19 and raw >= '9223372036854775807') then
    return redis.error_reply('WRONGTYPE the fence counter ' .. KEYS[2] .. ' is not a fence below 2^63 - 1')
  end
  counter = raw
end
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
if redis.call('EXISTS', KEYS[1]) == 1 then
  -- HGET fails with WRONGTYPE if the key is not a hash.
  if not redis.call('HGET', KEYS[1], ARGV[1]) then
    local owner, lock = '', false
    for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
      if f == ':at' then
        lock = true
      elseif owner == '' and string.sub(f, 1, 1) ~= ':' then
        owner = f
      end
    end
    if not lock then
      return redis.error_reply('WRONGTYPE the lock key holds a hash that is not a lock')
    end
    return {0, redis.call('PTTL', KEYS[1]), owner}
  end
  -- Our own request delivered twice (a client-side retry): keep the hold
  -- and its lease. The first delivery's lease already lasts as long as the
  -- caller counts (from before it sent the request), and an Extend may
  -- have set another since, which the holder trusts: resetting it could
  -- cut short a lease a majority is counted on for.
  return {1, counter, now_us}
end
redis.call('HSET', KEYS[1], ARGV[1], 1, ':meta', ARGV[3], ':at', string.format('%.0f', math.floor(now_us / 1000)))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, counter, now_us}
