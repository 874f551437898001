-- extend: reset the lease of KEYS[1] to ARGV[2] ms if ARGV[1] still holds
-- it on this node. A node that lost the lock (it expired, or the node
-- restarted empty) is never given it back: see docs/safety.md. A request
-- may reach the node late, after its client gave up waiting for it, and
-- must then not undo what the holder trusts since: a watchdog renewal
-- (ARGV[3] 'renew') only ever lengthens the lease, and an Extend (ARGV[3]
-- its number, growing with each Extend of the hold, kept in ':ext') is
-- applied only if no later Extend was.
-- Returns 1 when held (and extended), 0 when the token does not hold it here.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
if ARGV[3] == 'renew' then
  if redis.call('PTTL', KEYS[1]) >= tonumber(ARGV[2]) then return 1 end
else
  if tonumber(redis.call('HGET', KEYS[1], ':ext') or '0') >= tonumber(ARGV[3]) then return 1 end
  redis.call('HSET', KEYS[1], ':ext', ARGV[3])
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
