-- reenter: add one hold for ARGV[1] if it holds KEYS[1] on this node.
-- Returns the new hold count, or 0 when the token does not hold it here.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
end
return 0
