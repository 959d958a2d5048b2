-- due.lua: ids in one partition of the runnable index that are runnable by a time, oldest
-- first. Read-only.
--
-- KEYS[1]  ns:{T}:runnable   runnable index of the tag
--
-- ARGV[1]  the time (seconds since the epoch)
-- ARGV[2]  most ids to return
-- ARGV[3]  '1' to use max(ARGV[1], server clock): every READY turn, even one made runnable
--          after the caller read the clock (the claim itself still checks ARGV[1])
--
-- Returns {id, score, id, score, ...}
local bound = tonumber(ARGV[1])
if ARGV[3] == '1' then
  local t = redis.call('TIME')
  local server = tonumber(t[1]) + tonumber(t[2]) / 1000000
  if server > bound then bound = server end
end
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', bound, 'WITHSCORES', 'LIMIT', 0,
                  tonumber(ARGV[2]))
