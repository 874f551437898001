-- extend: reset the lease of KEYS[1] to ARGV[2] ms if ARGV[1] still holds it.
-- A request may reach Redis late, after its client gave up waiting for it,
-- and must then not undo what the holder trusts since: a watchdog renewal
-- (ARGV[3] 'renew') only ever lengthens the lease, and an Extend (ARGV[3]
-- its number, growing with each Extend of the hold, kept in ':ext') is
-- applied only if no later Extend was. 'reset' always writes: the acked
-- hand-over (replication.go) needs a write of its own for WAIT to cover.
-- Returns 1 when held (and extended), 0 when the token no longer holds it.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
if ARGV[3] == 'renew' then
  if redis.call('PTTL', KEYS[1]) >= tonumber(ARGV[2]) then return 1 end
elseif ARGV[3] ~= 'reset' then
  if tonumber(redis.call('HGET', KEYS[1], ':ext') or '0') >= tonumber(ARGV[3]) then return 1 end
  redis.call('HSET', KEYS[1], ':ext', ARGV[3])
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
