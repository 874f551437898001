-- forcerelease: an operator removes the lock whoever holds it, and the next
-- waiter gets it. Returns 1 if a lock was removed, 0 if there was none.
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
  end
  return 0
end
redis.call('DEL', KEYS[1])
hand_over()
return 1
