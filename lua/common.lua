-- Shared by the scripts that can take or hand over a lock or a semaphore's
-- permits (semaphore.lua describes its KEYS[1]). Those, and inspect.lua and
-- seminspect.lua, are called with the five keys below, which share one
-- Redis Cluster hash tag; semextend.lua, semttl.lua and semavailable.lua,
-- which touch KEYS[1] only, with that one alone.
--   KEYS[1] lock hash: owner token -> hold count, plus ':fence', ':meta', ':at'
--           (and ':ext', see extend.lua)
--   KEYS[2] fence counter: the last fencing token issued for the lock,
--           kept for FENCE_RETENTION_MS (see retention)
--   KEYS[3] queue: sorted set of waiting tokens, scored by arrival
--   KEYS[4] waiters: hash token -> "deadline_ms lease_ms client meta"
--   KEYS[5] wake channel prefix: hand-over messages "token fence" go to
--           KEYS[5]:client, the channel of the waiter's Client only

-- clock returns the server time in milliseconds and in microseconds. TTLs
-- follow the server clock, so waiter deadlines do too.
local function clock()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end

-- FENCE_RETENTION_MS is how long a fence counter lives: 24 hours from its
-- creation (a grant that finds it ahead of the clock sets its expiry
-- again, to at least this: see retention), after which the next grant
-- starts a new one. So a name locked
-- once does not stay in Redis forever. A counter that expired, like one
-- lost in a failover, is covered by the time floor of the fence (below).
local FENCE_RETENTION_MS = 86400000

-- retention is how long a counter at fence, ahead of the clock, lives:
-- FENCE_RETENTION_MS, or longer if the clock needs longer to catch up with
-- it (a counter moved forward by more than that). Were it to expire
-- first, the next grant would start again from the clock, below the
-- fences already issued.
local function retention(fence, now_us)
  local gap = math.ceil((tonumber(fence) - now_us) / 1000)
  return string.format('%.0f', math.max(FENCE_RETENTION_MS, gap + 1000))
end

-- inc returns n + 1 for n a string of decimal digits.
local function inc(n)
  local i = #n
  while i > 0 and string.byte(n, i) == 57 do i = i - 1 end -- '9'
  if i == 0 then return '1' .. string.rep('0', #n) end
  return string.sub(n, 1, i - 1) .. string.char(string.byte(n, i) + 1) .. string.rep('0', #n - i)
end

-- LAST_FENCE is 2^63 - 1: an int64 holds no fence after it.
local LAST_FENCE = '9223372036854775807'

-- is_fence reports whether s, a string, is a fence a next one can follow:
-- a positive int64 in decimal, below LAST_FENCE.
local function is_fence(s)
  return string.match(s, '^[1-9]%d*$') ~= nil and (#s < 19 or (#s == 19 and s < LAST_FENCE))
end

-- reply gives a fence (a decimal string) as an integer, which costs the
-- client less to read, while a double holds it exactly; beyond, as is.
local function reply(fence)
  local n = tonumber(fence)
  if n and n < 2^53 then return n end
  return fence
end

-- next_fence issues a fresh fencing token, returned as a decimal string
-- (exact beyond 2^53). handing is true for a hand-over, which has already
-- popped the waiter (and, in a release, deleted the lock): it must not
-- fail half way.
-- The fence is max(last + 1, server time in microseconds): it increases
-- even if the counter is lost (a failover that dropped the last writes, or
-- its expiry), as long as the server clock does not jump back further than
-- that.
local function next_fence(now_us, handing)
  -- One round of the counter in the common case: the clock has moved on
  -- since the last grant, so the new fence is the time, and SET ... GET
  -- returns the last one to check that. KEEPTTL leaves the expiry alone
  -- (rewriting it on every grant costs more than the rest of the SET).
  -- A counter of the wrong type (an operator's mistake) fails the script
  -- here when a free lock is being taken: nothing has been written yet. A
  -- hand-over cannot stop (Redis does not roll a script back): it replaces
  -- the counter, which starts again from the clock, as a corrupt one does.
  local fence = string.format('%.0f', now_us)
  local call = handing and redis.pcall or redis.call
  local raw = call('SET', KEYS[2], fence, 'GET', 'KEEPTTL')
  if raw == LAST_FENCE then
    -- Every fence has been issued: one from the clock would be smaller
    -- than the last, which the resource may have seen. Nothing is granted
    -- (as the redlock scripts refuse such a counter) and the counter is
    -- put back for an operator to see. A grant of a free lock fails here,
    -- before it writes the lock (a queued waiter's check has left the
    -- queue already: its wait ends with this error); a hand-over gets nil,
    -- and leaves the waiter queued, whose own check then fails.
    redis.call('SET', KEYS[2], raw, 'KEEPTTL')
    if handing then return nil end
    error('dlock fence counter exhausted: ' .. KEYS[2] .. ' holds 2^63 - 1, the last fence', 0)
  end
  if type(raw) == 'table' then -- pcall's error: SET ... GET gives a string or false
    redis.call('SET', KEYS[2], fence)
    raw = false
  end
  local last = raw and tonumber(raw)
  if last and last >= 2^53 and is_fence(raw) then
    -- Past the integers a double holds exactly, but still a fence (an
    -- int64): one more, counted in decimal.
    fence = inc(raw)
    redis.call('SET', KEYS[2], fence, 'PX', retention(fence, now_us))
  elseif not last or last ~= last or last >= 2^53 then
    -- A new counter, or one that is not a number a fence can follow (a
    -- value written by hand): it starts again from the clock, the floor
    -- that already covers a lost counter. Failing instead would leave a
    -- release that hands over half done.
    redis.call('PEXPIRE', KEYS[2], FENCE_RETENTION_MS)
  elseif last >= now_us then
    fence = string.format('%.0f', last + 1)
    redis.call('SET', KEYS[2], fence, 'PX', retention(fence, now_us))
  end
  return fence
end

-- grant makes token the holder with one hold and a fresh fencing token,
-- returned as a decimal string (see next_fence); nil, with nothing
-- written, if a hand-over finds every fence issued.
local function grant(token, lease, meta, now_ms, now_us, handing)
  local fence = next_fence(now_us, handing)
  if not fence then return nil end
  redis.call('HSET', KEYS[1], token, 1, ':fence', fence, ':meta', meta, ':at', now_ms)
  redis.call('PEXPIRE', KEYS[1], lease)
  return fence
end

-- waiter returns the lease, metadata and Client id of head's queue entry,
-- or nil if the entry has expired: a waiter that died leaves the queue
-- when its entry expires instead of blocking it.
local function waiter(head, now_ms)
  local entry = redis.call('HGET', KEYS[4], head)
  if not entry then return nil end
  local deadline, lease, client, meta = string.match(entry, '^(%d+) (%d+) (%S+) (.*)$')
  if not deadline or tonumber(deadline) <= now_ms then return nil end
  -- A lease PEXPIRE would refuse (out of range) or that would delete the
  -- lock at once (0) is a corrupt entry: handing it the lock would fail
  -- the hand-over half way, or grant a lock that is gone. It counts as
  -- expired. Digits PEXPIRE does not read ('007') are passed on as the
  -- number they are.
  local ms = tonumber(lease)
  if ms < 1 or ms >= 2^53 then return nil end
  return string.format('%.0f', ms), meta, client
end

-- live_waiters counts the queued waiters whose entries have not expired,
-- for the operators' inspect scripts: it writes nothing.
local function live_waiters(now_ms)
  local live = 0
  for _, entry in ipairs(redis.call('HVALS', KEYS[4])) do
    local deadline = tonumber(string.match(entry, '^(%d+) '))
    if deadline and deadline > now_ms then live = live + 1 end
  end
  return live
end

-- live_head returns the first waiter whose entry has not expired, dropping
-- the expired entries in front of it, and leaves it queued.
local function live_head(now_ms)
  while true do
    local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    if not head or waiter(head, now_ms) then return head end
    redis.call('ZREM', KEYS[3], head)
    redis.call('HDEL', KEYS[4], head)
  end
end

-- dequeue removes token from the queue.
local function dequeue(token)
  if redis.call('ZREM', KEYS[3], token) == 1 then
    redis.call('HDEL', KEYS[4], token)
  end
end

-- enqueue adds token at the back of the queue, or refreshes its entry and
-- keeps its place if it is already queued. Other data at the waiters' name
-- is returned as an error, with nothing written (Redis does not roll a
-- failed script back): the token would stay queued without an entry, in a
-- queue maybe just created without an expiry, if leaving it failed too.
local function enqueue(token, lease, client, meta, ttl, now_ms, now_us)
  local added = redis.call('ZADD', KEYS[3], 'NX', now_us, token)
  local err = redis.pcall('HSET', KEYS[4], token, (now_ms + ttl) .. ' ' .. lease .. ' ' .. client .. ' ' .. meta)
  if type(err) == 'table' then -- pcall's error: HSET gives a number
    if added == 1 then redis.call('ZREM', KEYS[3], token) end
    return err
  end
  -- The keys must outlive every entry, and Clients may have different
  -- queue TTLs: never shorten their life. Both always get the same expiry
  -- here, so the queue's tells. From Redis 7.0 (whose scripts see
  -- REDIS_VERSION_NUM), PEXPIRE ... GT lengthens the queue's expiry in the
  -- command that asks: one command fewer than PTTL + PEXPIRE when it
  -- lengthens it (the common case: later waiters, same queue TTL), one
  -- more when the queue already expires as late or later (a shorter queue
  -- TTL, or the same millisecond). GT counts a key without an expiry (a
  -- queue just created) as expiring never, so a 0 is followed by NX, which
  -- sets the expiry of a queue that has none and leaves a longer one alone.
  -- Before 7.0, or if GT is refused, the expiry is read first.
  local set
  if redis.REDIS_VERSION_NUM then set = redis.pcall('PEXPIRE', KEYS[3], ttl, 'GT') end
  if type(set) ~= 'number' then
    set = redis.call('PTTL', KEYS[3]) < ttl and redis.call('PEXPIRE', KEYS[3], ttl)
  elseif set == 0 then
    set = redis.call('PEXPIRE', KEYS[3], ttl, 'NX')
  end
  if set == 1 then
    redis.call('PEXPIRE', KEYS[4], ttl)
  elseif redis.call('PTTL', KEYS[4]) == -1 then
    -- The queue lives longer already, but the waiters' hash was just
    -- created: the queue holds members without entries (stale, or written
    -- by other code). It expires with the queue, not never.
    redis.call('PEXPIRE', KEYS[4], redis.call('PTTL', KEYS[3]))
  end
end

-- notify tells the Client of a waiter (head) that it has been granted
-- fence, on that Client's own channel.
local function notify(head, fence, client)
  local msg = head .. ' ' .. fence
  local channel = KEYS[5] .. ':' .. client
  -- Sharded pub/sub keeps the message on the lock's shard; servers
  -- before 7.0 lack it and get the classic command. pcall both: the
  -- hand-over stands even if the server refuses the message (an ACL
  -- without the channel); the waiter finds it at its next check.
  -- A SPUBLISH nobody heard goes by PUBLISH too: the waiter's Client
  -- subscribes with SUBSCRIBE where its own user may not SPUBLISH,
  -- whatever this user's ACL lets this script do.
  local sent = redis.pcall('SPUBLISH', channel, msg)
  if type(sent) ~= 'number' or sent == 0 then
    redis.pcall('PUBLISH', channel, msg)
  end
end

-- hand_over gives the free lock to the first live waiter, if any (it
-- returns that waiter, its fence and its lease in ms), and
-- tells that waiter's Client alone, on its own channel, so the new holder
-- needs no further round trip. Expired entries in front are dropped. It
-- takes the clock if the caller has not: a release with nobody queued
-- costs one ZPOPMIN, nothing more.
local function hand_over(now_ms, now_us)
  while true do
    -- A queue or waiters key of another type (other code wrote there)
    -- holds no waiter: pcall, so that the release before the hand-over
    -- stands and says so (Redis does not roll a failed script back).
    local popped = redis.pcall('ZPOPMIN', KEYS[3])
    local head = popped[1]
    if not head then return nil end
    if not now_ms then now_ms, now_us = clock() end
    local ok, lease, meta, client = pcall(waiter, head, now_ms)
    if not ok then return nil end
    local fence = lease and grant(head, lease, meta, now_ms, now_us, true)
    if lease and not fence then
      -- Every fence issued (next_fence): the waiter keeps its place. A
      -- queue that ZPOPMIN emptied, and so deleted, expires with the
      -- waiters again.
      redis.call('ZADD', KEYS[3], popped[2], head)
      local ttl = redis.call('PTTL', KEYS[4])
      if ttl > 0 and redis.call('PTTL', KEYS[3]) == -1 then redis.call('PEXPIRE', KEYS[3], ttl) end
      return nil
    end
    redis.call('HDEL', KEYS[4], head)
    if fence then
      notify(head, fence, client)
      return head, fence, tonumber(lease)
    end
  end
end
