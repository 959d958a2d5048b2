-- zcas.lua: compare-and-set scores of one due-index shard (tag -> earliest attention).
-- A score is replaced only if it is still the one the caller saw: a writer that lowered
-- it meanwhile (ZADD LT after its own script) wins.
--
-- KEYS[1]  ns:due:{d<k>}   one shard of the due index
--
-- ARGV     triples: tag, the score seen, the new score ('' removes the tag)
--
-- Returns the number of tags changed
local changed = 0
for i = 1, #ARGV, 3 do
  local tag, seen, new = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local current = redis.call('ZSCORE', KEYS[1], tag)
  if current and tonumber(current) == tonumber(seen) then
    if new == '' then
      redis.call('ZREM', KEYS[1], tag)
    else
      redis.call('ZADD', KEYS[1], new, tag)
    end
    changed = changed + 1
  end
end
return changed
