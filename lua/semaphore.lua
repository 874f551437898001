-- Shared by the semaphore scripts, which include common.lua before it. A
-- semaphore uses the five keys of common.lua, except that KEYS[1] is:
--   KEYS[1] holders hash: owner token -> "expiry_ms permits capacity fence ext meta"
--           (expiry_ms in server time; capacity: the semaphore's, as the
--           holder's Client gave it; ext as in extend.lua)
-- A waiter's entry in KEYS[4] carries "permits capacity meta" as its meta.
-- A call whose capacity is not that of the live holders fails (the
-- Clients disagree): it would enforce a limit of its own.
-- Every holder has its own expiry, so a holder that died gives its permits
-- back when its lease runs out while the others keep theirs.

-- holder parses a holder entry; nil if it is not one (other data at the
-- semaphore's name).
local function holder(entry)
  local expiry, permits, capacity, fence, ext, meta = string.match(entry, '^(%d+) (%d+) (%d+) (%d+) (%d+) (.*)$')
  if not expiry then return nil end
  return {expiry = tonumber(expiry), permits = tonumber(permits), capacity = tonumber(capacity), fence = fence, ext = ext, meta = meta}
end

-- not_semaphore fails the script: KEYS[1] holds a hash that is not a
-- semaphore's, which must not be written into.
local function not_semaphore()
  error({err = 'WRONGTYPE the semaphore key holds a hash that is not a semaphore'})
end

-- same_capacity fails the script if live holder h was granted under
-- another capacity than capacity (capacityMismatch in semaphore.go reads
-- this error).
local function same_capacity(h, capacity)
  if h.capacity ~= capacity then
    error({err = string.format('ERR dlock capacity mismatch: the semaphore is held with capacity %.0f, not %.0f', h.capacity, capacity)})
  end
end

-- write stores token's entry, and keeps the holders key alive at least as
-- long as it (never shortening it: the other holders may expire later).
local function write(token, h, now_ms)
  redis.call('HSET', KEYS[1], token, string.format('%.0f %d %.0f %s %s %s', h.expiry, h.permits, h.capacity, h.fence, h.ext, h.meta))
  local left = h.expiry - now_ms
  if redis.call('PTTL', KEYS[1]) < left then redis.call('PEXPIRE', KEYS[1], left) end
end

-- in_use drops the holders whose lease ran out and returns the permits the
-- others hold, the soonest expiry among them (nil if none) and token's
-- own entry, if it holds permits. It fails if a live holder was granted
-- under another capacity than capacity.
local function in_use(token, now_ms, capacity)
  local fields = redis.call('HGETALL', KEYS[1])
  local used, soonest, mine = 0, nil, nil
  for i = 1, #fields, 2 do
    local h = holder(fields[i + 1])
    if not h then not_semaphore() end
    if h.expiry <= now_ms then
      redis.call('HDEL', KEYS[1], fields[i])
    else
      same_capacity(h, capacity)
      used = used + h.permits
      if not soonest or h.expiry < soonest then soonest = h.expiry end
      if fields[i] == token then mine = h end
    end
  end
  return used, soonest, mine
end

-- grant_permits gives token permits for lease ms with a fresh fence,
-- returned as a decimal string.
local function grant_permits(token, permits, capacity, lease, meta, now_ms, now_us, handing)
  local fence = next_fence(now_us, handing)
  write(token, {expiry = now_ms + tonumber(lease), permits = permits, capacity = capacity, fence = fence, ext = '0', meta = meta}, now_ms)
  return fence
end

-- hand_over_permits grants the live waiters at the head of the queue, in
-- order, while their permits fit in capacity next to used, and tells each
-- one's Client. It stops at the first that does not fit (no waiter
-- overtakes it: a large request is not starved by small ones), and at
-- self, which the calling script serves itself, and at a waiter whose
-- Client gave another capacity (its own check serves it, or fails while
-- holders of this capacity are live). used may be nil: the permits in use
-- are then read once a waiter is found. It returns the head it stopped at
-- (nil: the queue is empty) and the permits then in use (nil if never
-- read).
local function hand_over_permits(capacity, used, self, now_ms, now_us)
  while true do
    local head = live_head(now_ms)
    if not head or head == self then return head, used end
    if not used then used = in_use(nil, now_ms, capacity) end
    local lease, meta, client = waiter(head, now_ms)
    local permits, cap, rest = string.match(meta, '^(%d+) (%d+) (.*)$')
    permits = tonumber(permits)
    if not permits or permits < 1 then
      dequeue(head) -- a corrupt entry: it holds no place
    elseif used + permits > capacity or tonumber(cap) ~= capacity then
      return head, used
    else
      dequeue(head)
      notify(head, grant_permits(head, permits, capacity, lease, rest, now_ms, now_us, true), client)
      used = used + permits
    end
  end
end
