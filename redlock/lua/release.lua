-- release: undo holds of ARGV[1] on this node down to ARGV[2] - 1 (ARGV[2]
-- is the hold level being released). Setting the count rather than
-- decrementing makes a repeated release of the same level harmless. The
-- last hold deletes the lock and, if ARGV[3] is '1', tells the waiters on
-- channel KEYS[2] that it is free.
-- Returns the holds left (0 when released), or -1 when not held.
local count = redis.call('HGET', KEYS[1], ARGV[1])
if not count then return -1 end
local keep = tonumber(ARGV[2]) - 1
if tonumber(count) <= keep then return tonumber(count) end
if keep > 0 then
  redis.call('HSET', KEYS[1], ARGV[1], keep)
  return keep
end
redis.call('DEL', KEYS[1])
-- pcall: the release stands even if the server refuses the message (an ACL
-- without the channel); blocked waiters then retry when the lease they were
-- refused for would have run out.
if ARGV[3] == '1' then redis.pcall('PUBLISH', KEYS[2], ARGV[1]) end
return 0
