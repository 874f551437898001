-- forcerelease: an operator removes the lock whoever holds it, or, if
-- ARGV[1] is given, only while that token holds it (the holder the operator
-- inspected), and the next waiter gets it. Returns 1 if a lock was removed,
-- 0 if there was none, -1 if another token than ARGV[1] holds it.
-- Only a lock is removed: a key of another type, or a hash without ':fence'
-- (other data at the lock's name), is left as it is.
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' or redis.call('HEXISTS', KEYS[1], ':fence') == 0 then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return redis.error_reply('WRONGTYPE the lock key holds a value that is not a lock')
  end
  return 0
end
if ARGV[1] and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return -1
end
redis.call('DEL', KEYS[1])
hand_over()
return 1
