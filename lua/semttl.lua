-- semttl: the lease left on ARGV[1]'s permits in ms, or -3 when the token
-- holds none.
local now_ms = clock()
local entry = redis.call('HGET', KEYS[1], ARGV[1])
if not entry then return -3 end
local h = holder(entry)
if not h then not_semaphore() end
if h.expiry <= now_ms then return -3 end
return h.expiry - now_ms
