-- extend: reset the lease of KEYS[1] to ARGV[2] ms if ARGV[1] still holds it.
-- A request may reach Redis late, after its client gave up waiting for it,
-- and must then not undo what the holder trusts since: a watchdog renewal
-- (ARGV[3] 'renew') only ever lengthens the lease, and an Extend (ARGV[3]
-- its number, growing with each Extend of the hold, kept in ':ext') is
-- applied only if no later Extend was. A renewal writes even when it keeps
-- the lease as it is: with replica acknowledgement, the WAIT after it must
-- cover a write of this connection (a server may count only those).
-- Returns 1 when held (and extended), 0 when the token no longer holds it.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
local ttl = tonumber(ARGV[2])
if ARGV[3] == 'renew' then
  ttl = math.max(ttl, redis.call('PTTL', KEYS[1]))
else
  if tonumber(redis.call('HGET', KEYS[1], ':ext') or '0') >= tonumber(ARGV[3]) then return 1 end
  redis.call('HSET', KEYS[1], ':ext', ARGV[3])
end
redis.call('PEXPIRE', KEYS[1], ttl)
return 1
