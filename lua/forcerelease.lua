-- forcerelease: an operator removes the lock whoever holds it, and the next
-- waiter gets it. Returns 1 if a lock was removed, 0 if there was none.
-- Only a lock is removed: a key of another type, or a hash without ':fence'
-- (other data at the lock's name), is left as it is.
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' or redis.call('HEXISTS', KEYS[1], ':fence') == 0 then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return redis.error_reply('WRONGTYPE the lock key holds a value that is not a lock')
  end
  return 0
end
redis.call('DEL', KEYS[1])
hand_over()
return 1
