-- holdstats: record one hold time of a lock in its statistics hash, for
-- adaptive leases. The averages are exponentially weighted, as TCP
-- estimates round-trip times (RFC 6298): the mean moves 1/8 of the way to
-- each sample, the mean deviation 1/4.
-- KEYS[1] statistics hash: mean_us, dev_us, n
-- ARGV[1] hold time in microseconds, ARGV[2] ms the statistics outlive
-- their last update.
-- Returns {mean_us, dev_us, n} after the update.
local held = tonumber(ARGV[1])
-- num reads a statistic: nil unless a number in [0, 2^63), which HoldStats
-- reads back once written as an integer (tonumber reads "inf", "nan" and
-- "1e300" too, which would stay unreadable at every update, or for
-- thousands).
local function num(v)
  local x = tonumber(v)
  if x and x >= 0 and x < 2^63 then return x end
  return nil
end
local s = redis.call('HMGET', KEYS[1], 'mean_us', 'dev_us', 'n')
local mean, dev, n = num(s[1]), num(s[2]), num(s[3])
-- The count is written as a Lua number: a whole one below 2^53 is written
-- as digits ("1.5" would stay fractional, and "1e300" in exponent form).
if not mean or not dev or not n or n % 1 ~= 0 or n >= 2^53 then
  mean, dev, n = held, held / 2, 0
else
  dev = 0.75 * dev + 0.25 * math.abs(held - mean)
  mean = 0.875 * mean + 0.125 * held
end
n = n + 1
mean, dev = string.format('%.0f', mean), string.format('%.0f', dev)
redis.call('HSET', KEYS[1], 'mean_us', mean, 'dev_us', dev, 'n', n)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {tonumber(mean), tonumber(dev), n}
