-- acquire: take the lock for ARGV[1] if it is free and nobody is queued
-- before it; otherwise optionally join the queue.
-- ARGV[1] token, ARGV[2] lease ms, ARGV[3] holder metadata,
-- ARGV[4] '1' to join the queue, ARGV[5] queue entry ttl ms,
-- ARGV[6] lease ms to grant if the lock is handed over while queued,
-- ARGV[7] the waiting client's channel suffix (KEYS[5]:ARGV[7]),
-- ARGV[8] (optional) lease ms to lengthen a lock found ours to.
-- Returns {1, fence} when taken now, {2, fence, pttl} when it had been
-- handed over to this token, {0, pttl, holder's fence} when held by someone else
-- (a hand-over message to this token with a fence up to that one is
-- stale); without that fence when it does not join the queue (ARGV[4]
-- not '1').
local token = ARGV[1]

-- pttl is the lock's, if the script has just set it (a hand-over).
local function wait(fence, now_ms, now_us, pttl)
  if ARGV[4] == '1' then
    local err = enqueue(token, ARGV[6], ARGV[7], ARGV[3], tonumber(ARGV[5]), now_ms, now_us)
    if err then return err end
  end
  return {0, pttl or redis.call('PTTL', KEYS[1]), fence and reply(fence)}
end

-- One read, no more on the free path: whether token holds the lock, and
-- the holder's fence. HGETALL fails with WRONGTYPE if the key is not a
-- hash; a hash without ':fence' is not a lock either (other data at its
-- name): taking it would write into that data, and the release delete it.
-- Either way nothing is written.
local fields, mine, fence = redis.call('HGETALL', KEYS[1]), false, nil
for i = 1, #fields, 2 do
  if fields[i] == token then mine = true elseif fields[i] == ':fence' then fence = fields[i + 1] end
end
if fence then
  if mine then
    local pttl = redis.call('PTTL', KEYS[1])
    if ARGV[8] then
      -- A write of the caller's connection, which its WAIT then covers
      -- (with replica acknowledgement a hand-over found by a check is
      -- trusted from here); only ever lengthening, as a renewal does.
      pttl = math.max(pttl, tonumber(ARGV[8]))
      redis.call('PEXPIRE', KEYS[1], pttl)
    end
    return {2, reply(fence), pttl}
  end
  if ARGV[4] ~= '1' then return {0, redis.call('PTTL', KEYS[1])} end
  return wait(fence, clock())
end
if #fields > 0 then
  return redis.error_reply('WRONGTYPE the lock key holds a hash that is not a lock')
end

local now_ms, now_us = clock()
local head = live_head(now_ms)
if head and head ~= token then
  -- The holder's lease ran out with waiters queued: the first one goes
  -- first, with the lease its entry asked for (the lock's PTTL now).
  local _, fence, lease = hand_over(now_ms, now_us)
  return wait(fence, now_ms, now_us, lease)
end
if head then dequeue(token) end
return {1, reply(grant(token, ARGV[2], ARGV[3], now_ms, now_us))}
