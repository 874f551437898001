-- extend: reset the lease of KEYS[1] to ARGV[2] ms if ARGV[1] still holds it.
-- A request may reach Redis late, after its client gave up waiting for it,
-- and must then not undo what the holder trusts since: a watchdog renewal
-- (ARGV[3] 'renew') only ever lengthens the lease, and an Extend (ARGV[3]
-- its number, growing with each Extend of the hold, kept in ':ext') is
-- applied only if no later Extend was. Every call that answers 1 writes,
-- even when it changes nothing (a renewal keeping the lease, an Extend
-- already applied and sent again on a new connection): with replica
-- acknowledgement, the WAIT after it must cover a write of this connection
-- (a server may count only those).
-- Returns 1 when held (and extended), 0 when the token no longer holds it.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
local ttl = tonumber(ARGV[2])
if ARGV[3] == 'renew' then
  -- From Redis 7.0 (whose scripts see REDIS_VERSION_NUM), PEXPIRE ... GT
  -- lengthens the lease in the command that compares, and a 1 is a write.
  -- A 0 (the lease is that long already, or the key has no expiry, which
  -- GT counts as never expiring) or a server that refuses GT goes on as
  -- before: read the lease, and write the longer of the two.
  if redis.REDIS_VERSION_NUM and redis.pcall('PEXPIRE', KEYS[1], ttl, 'GT') == 1 then return 1 end
  ttl = math.max(ttl, redis.call('PTTL', KEYS[1]))
else
  local last = redis.call('HGET', KEYS[1], ':ext') or '0'
  if tonumber(last) >= tonumber(ARGV[3]) then
    redis.call('HSET', KEYS[1], ':ext', last)
    return 1
  end
  redis.call('HSET', KEYS[1], ':ext', ARGV[3])
end
redis.call('PEXPIRE', KEYS[1], ttl)
return 1
