-- release: undo holds of ARGV[1] down to ARGV[2] - 1 (ARGV[2] is the hold
-- level being released). Setting the count rather than decrementing makes
-- a repeated release of the same level harmless. The last hold deletes the
-- lock and hands it to the next waiter. A token that does not hold the
-- lock only leaves the queue (a waiter giving up).
-- Returns the holds left (0 when released), or -1 when not held.
-- A lock key of another type (a value written over it by other code) is
-- an error, but a waiter giving up still leaves the queue: its entry would
-- be handed the lock once that value is gone.
local count = redis.pcall('HGET', KEYS[1], ARGV[1])
if type(count) == 'table' then
  dequeue(ARGV[1])
  return count
end
if not count then
  dequeue(ARGV[1])
  return -1
end
local keep = tonumber(ARGV[2]) - 1
if tonumber(count) <= keep then return tonumber(count) end
if keep > 0 then
  redis.call('HSET', KEYS[1], ARGV[1], keep)
  return keep
end
redis.call('DEL', KEYS[1])
hand_over()
return 0
