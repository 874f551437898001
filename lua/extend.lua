-- extend: reset the lease of KEYS[1] to ARGV[2] ms if ARGV[1] still holds it.
-- A watchdog renewal (ARGV[3] 'renew') only ever lengthens the lease: one
-- that reached Redis late, after its client gave up waiting for it, must
-- not cut short a longer lease that an Extend set meanwhile.
-- Returns 1 when held (and extended), 0 when the token no longer holds it.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
if ARGV[3] ~= 'renew' or redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
