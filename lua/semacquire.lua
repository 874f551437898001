-- semacquire: take ARGV[8] of the ARGV[9] permits of a semaphore for
-- ARGV[1] if they are free and nobody is queued before it; otherwise
-- optionally join the queue. ARGV[1]..ARGV[7] are as in acquire.lua, and
-- ARGV[10] (optional) as its ARGV[8]: lease ms to lengthen permits found
-- ours to.
-- Returns {1, fence} when taken now, {2, fence, pttl} when they had been
-- handed over to this token, {0, pttl, last fence} when not free (pttl:
-- until the soonest holder's lease may run out, -1 if none holds any; a
-- hand-over message to this token with a fence up to the last one is
-- stale).
local token, permits, capacity = ARGV[1], tonumber(ARGV[8]), tonumber(ARGV[9])

local now_ms, now_us = clock()
local s = open(token, redis.call('PTTL', KEYS[1]))
settle(s, now_ms, capacity)
local mine = s.mine
if mine and mine.expiry > now_ms then
  if ARGV[10] then
    -- A write of the caller's connection, which its WAIT then covers (as
    -- in acquire.lua); only lengthening, so soonest stays valid.
    mine.expiry = math.max(mine.expiry, now_ms + tonumber(ARGV[10]))
    write(s, token, mine, now_ms, false)
  end
  return {2, reply(mine.fence), mine.expiry - now_ms}
end
-- Holders whose lease ran out may have made room for the waiters first
-- in line: they go first.
local head = hand_over_permits(s, capacity, token, now_ms, now_us)
if (not head or head == token) and s.used + permits <= capacity then
  if head then dequeue(token) end
  return {1, reply(grant_permits(s, token, permits, capacity, ARGV[2], ARGV[3], now_ms, now_us))}
end
-- Waiters granted just now are left out: their leases are renewed once
-- they learn of them, and a waiter checks again every third of its queue
-- entry's TTL anyway.
local pttl = s.soonest and s.soonest - now_ms or -1
if ARGV[4] ~= '1' then return {0, pttl} end
local err = enqueue(token, ARGV[6], ARGV[7], ARGV[8] .. ' ' .. ARGV[9] .. ' ' .. ARGV[3], tonumber(ARGV[5]), now_ms, now_us)
if err then return err end
-- A counter that is not a fence (written by hand, or of another type) is
-- replaced, from the clock, by the next grant: the clock is then the
-- floor of the fences, as for a lost counter. Failing here would end the
-- wait, and replying it would fail the client's read of the reply.
local last = redis.pcall('GET', KEYS[2])
if type(last) ~= 'string' or not is_fence(last) then
  last = string.format('%.0f', now_us)
end
return {0, pttl, reply(last)}
