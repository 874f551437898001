-- seminspect: a semaphore's state for operators, read at once on the
-- server that holds it (the leases and the waiters' deadlines follow its
-- clock). It writes nothing.
-- Returns {live waiters, then per live holder: token, lease left in ms,
-- permits, capacity, fence, meta}. Other data at the waiters' name reads
-- as -1 waiters: the holders are still read (a release hands over without
-- the waiters, see semrelease.lua).
-- A holder whose lease ran out is no longer one. Fields whose name starts
-- with ':' are skipped whatever they hold: bookkeeping, maybe of a later
-- version.
local now_ms = clock()
local ok, waiters = pcall(live_waiters, now_ms)
local out = {ok and waiters or -1}
each_holder(function(token, h)
  if h.expiry > now_ms then
    for _, v in ipairs({token, h.expiry - now_ms, h.permits, h.capacity, h.fence, h.meta}) do
      out[#out + 1] = v
    end
  end
end, true)
return out
