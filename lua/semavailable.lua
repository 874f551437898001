-- semavailable: how many of a semaphore's ARGV[1] permits no live holder
-- holds now (waiters may be queued for them). It writes nothing.
local now_ms = clock()
local used = 0
for _, v in ipairs(redis.call('HVALS', KEYS[1])) do
  local h = holder(v)
  if not h then not_semaphore() end
  if h.expiry > now_ms then used = used + h.permits end
end
return tonumber(ARGV[1]) - used
