-- extend: reset the lease of KEYS[1] to ARGV[2] ms if ARGV[1] still holds it.
-- Returns 1 when extended, 0 when the token no longer holds the lock.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
