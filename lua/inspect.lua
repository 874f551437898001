-- inspect: a lock's state for operators, read at once on the server that
-- holds it: the waiters' deadlines were written by that server's clock.
-- KEYS as in common.lua (1 lock hash, 2 fence counter, 4 waiters).
-- Returns {the lock hash as field, value, ...; its pttl; the fence counter,
-- or '' if none; the number of waiters whose entries have not expired}.
-- A hash without ':fence' is not a lock (other data at its name), as for
-- acquire.lua and forcerelease.lua.
local hash, lock = redis.call('HGETALL', KEYS[1]), false
for i = 1, #hash, 2 do
  if hash[i] == ':fence' then lock = true end
end
if #hash > 0 and not lock then
  return redis.error_reply('WRONGTYPE the lock key holds a hash that is not a lock')
end
return {hash, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]) or '', live_waiters(clock())}
