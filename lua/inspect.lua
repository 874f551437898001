-- inspect: a lock's state for operators, read at once on the server that
-- holds it: the waiters' deadlines were written by that server's clock.
-- KEYS as in common.lua (1 lock hash, 2 fence counter, 4 waiters).
-- Returns {the lock hash as field, value, ...; its pttl; the fence counter,
-- or '' if none; the number of waiters whose entries have not expired;
-- the names, space-separated ('' if none), of those of KEYS 2 and 4 that
-- hold other data}.
-- A hash without ':fence' is not a lock (other data at its name), as for
-- acquire.lua and forcerelease.lua. Other data at the fence counter's or
-- the waiters' name still leaves the lock to read (a release removes it,
-- see hand_over): it reads as no counter, or no waiters, and is named.
local hash, lock = redis.call('HGETALL', KEYS[1]), false
for i = 1, #hash, 2 do
  if hash[i] == ':fence' then lock = true end
end
if #hash > 0 and not lock then
  return redis.error_reply('WRONGTYPE the lock key holds a hash that is not a lock')
end
local other = {}
local fence = redis.pcall('GET', KEYS[2])
if type(fence) == 'table' then -- pcall's error: GET gives a string or false
  other[#other + 1], fence = 'fence', false
end
local ok, waiters = pcall(live_waiters, clock())
if not ok then
  other[#other + 1], waiters = 'waiters', 0
end
return {hash, redis.call('PTTL', KEYS[1]), fence or '', waiters, table.concat(other, ' ')}
