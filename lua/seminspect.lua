-- seminspect: a semaphore's state for operators, read at once on the
-- server that holds it (the leases and the waiters' deadlines follow its
-- clock). It writes nothing.
-- Returns {live waiters, then per live holder: token, lease left in ms,
-- permits, capacity, fence, meta}.
-- A field whose name starts with ':' is bookkeeping, not a holder (tokens
-- are hex), and is skipped whatever it holds; a holder whose lease ran out
-- is no longer one.
local now_ms = clock()
local fields = redis.call('HGETALL', KEYS[1])
local out = {live_waiters(now_ms)}
for i = 1, #fields, 2 do
  if string.sub(fields[i], 1, 1) ~= ':' then
    local h = holder(fields[i + 1]) or not_semaphore()
    if h.expiry > now_ms then
      for _, v in ipairs({fields[i], h.expiry - now_ms, h.permits, h.capacity, h.fence, h.meta}) do
        out[#out + 1] = v
      end
    end
  end
end
return out
