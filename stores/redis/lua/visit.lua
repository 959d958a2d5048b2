-- visit.lua: what one partition of the runnable index holds up to a time, and its earliest
-- score (for the due index). Read-only.
--
-- KEYS[1]  ns:{T}:runnable   runnable index of the tag
--
-- ARGV[1]  the time (seconds since the epoch)
-- ARGV[2]  most ids to return
--
-- Returns {earliest score or '', id, score, id, score, ...}
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local reply = {first[2] or ''}
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0,
                       tonumber(ARGV[2]))
for _, v in ipairs(due) do reply[#reply + 1] = v end
return reply
