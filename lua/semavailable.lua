-- semavailable: how many of a semaphore's ARGV[1] permits no live holder
-- holds now (waiters may be queued for them). It writes nothing. A
-- capacity other than the live holders' fails (same_capacity).
local now_ms, capacity = clock(), tonumber(ARGV[1])
local s = open(nil)
settle(s, now_ms, capacity, true)
return capacity - s.used
