-- extend: reset the lease of KEYS[1] to ARGV[2] ms if ARGV[1] still holds
-- it on this node. A node that lost the lock (it expired, or the node
-- restarted empty) is never given it back: see docs/safety.md.
-- Returns 1 when extended, 0 when the token does not hold the lock here.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
