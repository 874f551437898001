-- ttl: the remaining lease of KEYS[1] on this node in ms if ARGV[1] holds
-- it, else -3.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return redis.call('PTTL', KEYS[1])
end
return -3
