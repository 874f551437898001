-- semrelease: give back the permits ARGV[1] holds in a semaphore of ARGV[2]
-- permits, or take it out of the queue (a waiter giving up), and hand the
-- permits free then to the waiters first in line: a waiter that leaves
-- may have been the one the others waited behind.
-- Returns 0 when released, -1 when the token held no permits (its lease
-- had run out, or it never held any).
-- A holders key of another type is an error, but a waiter giving up still
-- leaves the queue (as in release.lua): its entry would be handed permits
-- once that value is gone. With ARGV[3] 'holder' (an operator's
-- ForceRelease), only a holder is released: a waiter keeps its place.
local token, capacity = ARGV[1], tonumber(ARGV[2])
local leave = ARGV[3] ~= 'holder'
local now_ms, now_us = clock()
local ok, s = pcall(open, token)
if not ok then
  if leave then pcall(dequeue, token) end
  -- pcall gives the error as its message (Redis 7), which returned as it
  -- is would be a plain string, not an error reply.
  if type(s) == 'table' then return s end
  return redis.error_reply(s)
end
local h = s.mine
-- ForceRelease of a token not in the hash: a hash that is not a
-- semaphore's fails as in seminspect.lua, not as nothing held. Not settle:
-- it checks the capacity, which ForceRelease may give another.
if not h and not leave then each_holder(function() end, true) end
if h then drop(s, token, h) end
-- A live holder's permits go to the waiters under the capacity it was
-- granted with: an operator's ForceRelease (admin_permits.go) may give
-- another (an Unlock gives that one). Otherwise the waiters are served
-- under the capacity every holder left was granted with, if any: a waiter
-- leaving may give another (refused for it), and under that one the
-- waiters it held back would wait for their next check. Once no holder is
-- left, the first waiter's own capacity serves (hand_over_permits).
if h and h.expiry > now_ms then
  capacity = h.capacity
elseif s.soonest then
  capacity = s.capacity
end
-- The release stands even if the queue cannot be left or served (other
-- data at its names: Redis does not roll a failed script back).
pcall(function()
  -- A holder is not queued: its grant took it out of the queue.
  if not h and leave then dequeue(token) end
  -- A count whose soonest has passed may still count holders whose lease
  -- ran out: read them all now, so that the last live holder leaving
  -- takes the key with it instead of leaving the bookkeeping behind.
  if h and s.soonest and now_ms >= s.soonest then settle(s, now_ms, capacity) end
  hand_over_permits(s, capacity, nil, now_ms, now_us, true)
end)
if h and h.expiry > now_ms then return 0 end
return -1
