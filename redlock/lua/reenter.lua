-- reenter: raise the hold count of ARGV[1] on this node to ARGV[2], the
-- level the client re-enters at (one above the count it last had back), if
-- ARGV[1] holds KEYS[1] here. A count already there is this request
-- delivered twice (go-redis sends it again after a lost reply): done, not
-- one more. A node below ARGV[2] by more than one (it missed a re-entry)
-- is brought up to it as well.
-- Returns ARGV[2], or 0 when the token does not hold it here.
local count = redis.call('HGET', KEYS[1], ARGV[1])
if not count then return 0 end
if tonumber(count) < tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
return tonumber(ARGV[2])
