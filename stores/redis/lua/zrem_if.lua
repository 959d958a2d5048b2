-- zrem_if.lua: remove a member from a sorted set only if its score is still the one the
-- caller read (a compare-and-delete for pruning the global partition sets).
--
-- KEYS[1]  a bucket of ns:partitions or ns:retained (ns:partitions:{p<k>}, ...), or the
--          single key of an earlier release
--
-- ARGV[1]  member (a tag)
-- ARGV[2]  the score the caller read
--
-- Returns 1 if removed, else 0
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) == tonumber(ARGV[2]) then
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0
