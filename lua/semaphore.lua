-- Shared by the semaphore scripts, which include common.lua before it. A
-- semaphore uses the five keys of common.lua, except that KEYS[1] is:
--   KEYS[1] holders hash: owner token -> "expiry_ms permits capacity fence ext meta"
--           (expiry_ms in server time; capacity: the semaphore's, as the
--           holder's Client gave it; ext as in extend.lua), plus the
--           bookkeeping ':state' -> "used soonest capacity" (see open)
-- A waiter's entry in KEYS[4] carries "permits capacity meta" as its meta.
-- A call whose capacity is not that of the live holders fails (the
-- Clients disagree): it would enforce a limit of its own.
-- Every holder has its own expiry, so a holder that died gives its permits
-- back when its lease runs out while the others keep theirs.

-- STATE is the bookkeeping field; owner tokens are hex, so no holder's.
local STATE = ':state'

-- holder parses a holder entry; nil if it is not one (other data at the
-- semaphore's name).
local function holder(entry)
  local expiry, permits, capacity, fence, ext, meta = string.match(entry, '^(%d+) (%d+) (%d+) (%d+) (%d+) (.*)$')
  if not expiry then return nil end
  return {expiry = tonumber(expiry), permits = tonumber(permits), capacity = tonumber(capacity), fence = fence, ext = ext, meta = meta}
end

-- not_semaphore fails the script: KEYS[1] holds a hash that is not a
-- semaphore's, which must not be written into. Errors are raised as
-- strings: Redis before 7.0 cannot raise a table (redis.error_reply's), and
-- either way the reply holds the message after a prefix of Redis's own.
local function not_semaphore()
  error('WRONGTYPE the semaphore key holds a hash that is not a semaphore', 0)
end

-- each_holder calls fn(token, h) for every holder entry h of KEYS[1],
-- skipping STATE, and fails the script at a field that is not a holder's.
-- With any_colon it skips every field whose name starts with ':' (tokens
-- are hex), as a reader may (bookkeeping of a later version); settle does
-- not, or it would take a hash of such fields alone for an empty
-- semaphore and write into it. It returns the fields it read.
local function each_holder(fn, any_colon)
  local fields = redis.call('HGETALL', KEYS[1])
  for i = 1, #fields, 2 do
    local f = fields[i]
    if f ~= STATE and not (any_colon and string.sub(f, 1, 1) == ':') then
      fn(f, holder(fields[i + 1]) or not_semaphore())
    end
  end
  return fields
end

-- same_capacity fails the script if the live holders were granted under
-- another capacity (held) than capacity (capacityMismatch in semaphore.go
-- reads this error).
local function same_capacity(held, capacity)
  if held ~= capacity then
    error(string.format('dlock capacity mismatch: the semaphore is held with capacity %.0f, not %.0f', held, capacity), 0)
  end
end

-- open reads the semaphore's bookkeeping, and token's entry as s.mine if
-- token is given. pttl is the holders key's PTTL if the caller read it
-- (-2: there is no key, so nothing to read).
-- The bookkeeping keeps the calls from reading every holder: used is the
-- permits of all the entries, and soonest a time at or before the
-- earliest of their expiries. So while the server time is before soonest
-- no entry has expired and used is what the live holders hold; from
-- soonest on, settle reads them all. Renewals only lengthen leases, so
-- soonest stays at or before the earliest without being rewritten, and a
-- scan is due about once per lease, not once per call. s.counted is false
-- when the key has entries but no bookkeeping (written by an older
-- version, or another program): settle then reads them all.
local function open(token, pttl)
  local s = {used = 0, counted = true, pttl = pttl}
  if pttl == -2 then return s end
  local got = redis.call('HMGET', KEYS[1], STATE, token or STATE)
  local used, soonest, capacity = string.match(got[1] or '', '^(%d+) (%d+) (%d+)$')
  if used then
    s.used, s.soonest, s.capacity = tonumber(used), tonumber(soonest), tonumber(capacity)
  else
    s.counted = false
  end
  if token and got[2] then s.mine = holder(got[2]) or not_semaphore() end
  return s
end

-- state_of is the bookkeeping field's value for s.
local function state_of(s)
  return string.format('%.0f %.0f %.0f', s.used, s.soonest, s.capacity)
end

-- settle makes s exact at now_ms, and fails if the live holders were
-- granted under another capacity than capacity. Before s.soonest nothing
-- has expired; from then on it reads every entry, drops those whose lease
-- ran out (unless read_only) and counts the others.
local function settle(s, now_ms, capacity, read_only)
  if s.counted and (not s.soonest or now_ms < s.soonest) then
    if s.soonest then same_capacity(s.capacity, capacity) end
    return
  end
  local used, soonest, expired = 0, nil, {}
  local fields = each_holder(function(token, h)
    if h.expiry > now_ms then
      same_capacity(h.capacity, capacity)
      used = used + h.permits
      soonest = math.min(soonest or h.expiry, h.expiry)
    else
      expired[#expired + 1] = token
    end
  end)
  s.used, s.soonest, s.capacity, s.counted = used, soonest, capacity, true
  if read_only then return end
  -- Only now that nothing can fail: an error after an entry's HDEL would
  -- leave the bookkeeping counting it (Redis does not roll a script back).
  for _, field in ipairs(expired) do redis.call('HDEL', KEYS[1], field) end
  if soonest then
    redis.call('HSET', KEYS[1], STATE, state_of(s))
  else
    -- The last field, if any: the key is gone.
    if #fields > 0 then redis.call('HDEL', KEYS[1], STATE) end
    s.pttl = -2
  end
end

-- write stores token's entry h (and the bookkeeping, if counted), and
-- keeps the holders key alive at least as long as it (never shortening
-- it: the other holders may expire later).
local function write(s, token, h, now_ms, counted)
  local entry = string.format('%.0f %d %.0f %s %s %s', h.expiry, h.permits, h.capacity, h.fence, h.ext, h.meta)
  if counted then
    redis.call('HSET', KEYS[1], token, entry, STATE, state_of(s))
  else
    redis.call('HSET', KEYS[1], token, entry)
  end
  local left = h.expiry - now_ms
  if not s.pttl then s.pttl = redis.call('PTTL', KEYS[1]) end
  if s.pttl < left then
    redis.call('PEXPIRE', KEYS[1], left)
    s.pttl = left
  end
end

-- drop removes token's entry h, a holder's, and counts its permits back.
local function drop(s, token, h)
  if not s.counted then
    redis.call('HDEL', KEYS[1], token)
    return
  end
  s.used = s.used - h.permits
  if s.used > 0 then
    redis.call('HDEL', KEYS[1], token)
    redis.call('HSET', KEYS[1], STATE, state_of(s))
  else
    redis.call('HDEL', KEYS[1], token, STATE)
    s.soonest, s.pttl = nil, nil
  end
end

-- grant_permits gives token permits for lease ms with a fresh fence,
-- returned as a decimal string; nil, with nothing written, if a
-- hand-over finds every fence issued (next_fence). s must be settled.
local function grant_permits(s, token, permits, capacity, lease, meta, now_ms, now_us, handing)
  local fence = next_fence(now_us, handing)
  if not fence then return nil end
  local h = {expiry = now_ms + tonumber(lease), permits = permits, capacity = capacity, fence = fence, ext = '0', meta = meta}
  s.used, s.capacity = s.used + permits, capacity
  s.soonest = math.min(s.soonest or h.expiry, h.expiry)
  write(s, token, h, now_ms, true)
  return fence
end

-- hand_over_permits grants the live waiters at the head of the queue, in
-- order, while their permits fit in capacity next to those in use, and
-- tells each one's Client. It stops at the first that does not fit (no
-- waiter overtakes it: a large request is not starved by small ones),
-- and at self, which the calling script serves itself, and at a waiter
-- whose Client gave another capacity (its own check serves it, or fails
-- while holders of this capacity are live). With adopt (a caller that
-- asks nothing for itself: a release), a waiter first in line while
-- nobody holds permits is served under its own capacity, which is the
-- semaphore's from then on, rather than at its next check. s is settled
-- once a waiter is found. It returns the head it stopped at (nil: the
-- queue is empty).
local function hand_over_permits(s, capacity, self, now_ms, now_us, adopt)
  while true do
    local head = live_head(now_ms)
    if not head or head == self then return head end
    settle(s, now_ms, capacity)
    local lease, meta, client = waiter(head, now_ms)
    local permits, cap, rest = string.match(meta, '^(%d+) (%d+) (.*)$')
    permits = tonumber(permits)
    if adopt and permits and s.used == 0 then capacity = tonumber(cap) end
    if not permits or permits < 1 then
      dequeue(head) -- a corrupt entry: it holds no place
    elseif s.used + permits > capacity or tonumber(cap) ~= capacity then
      return head
    else
      local fence = grant_permits(s, head, permits, capacity, lease, rest, now_ms, now_us, true)
      -- Every fence issued: the waiter keeps its place, its check fails.
      if not fence then return head end
      dequeue(head)
      notify(head, fence, client)
    end
  end
end
