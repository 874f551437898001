-- semavailable: how many of a semaphore's ARGV[1] permits no live holder
-- holds now (waiters may be queued for them). It writes nothing. A
-- capacity other than the live holders' fails (same_capacity).
local now_ms, capacity = clock(), tonumber(ARGV[1])
local used = 0
for _, v in ipairs(redis.call('HVALS', KEYS[1])) do
  local h = holder(v)
  if not h then not_semaphore() end
  if h.expiry > now_ms then
    same_capacity(h, capacity)
    used = used + h.permits
  end
end
return capacity - used
