-- semextend: reset the lease of ARGV[1]'s permits to ARGV[2] ms, as
-- extend.lua does for a lock: a renewal (ARGV[3] 'renew') only ever
-- lengthens it, an Extend (ARGV[3] its number) applies only if no later
-- Extend was.
-- Returns 1 when held (and extended), 0 when the token holds no permits.
local now_ms = clock()
local s = open(ARGV[1])
local h = s.mine
if not h or h.expiry <= now_ms then return 0 end
local expiry = now_ms + tonumber(ARGV[2])
if ARGV[3] == 'renew' then
  h.expiry = math.max(h.expiry, expiry)
elseif tonumber(h.ext) < tonumber(ARGV[3]) then
  h.expiry, h.ext = expiry, ARGV[3]
end
-- An Extend may shorten the lease: soonest must stay at or before it.
local earlier = s.counted and s.soonest and h.expiry < s.soonest
if earlier then s.soonest = h.expiry end
write(s, ARGV[1], h, now_ms, earlier)
return 1
