-- memory_add.lua: append messages to a conversation's memory, skipping ids already there
-- (adding the same messages twice, from any number of runners, stores them once).
--
-- KEYS[1]  ns:{T}:cm:<conversation>   list of messages (JSON), oldest first
-- KEYS[2]  ns:{T}:ci:<conversation>   set of the message ids in the list
--
-- ARGV[1..2n]  pairs: message id, message JSON
--
-- Returns the number of messages appended.
local added = 0
for i = 1, #ARGV, 2 do
  if redis.call('SADD', KEYS[2], ARGV[i]) == 1 then
    redis.call('RPUSH', KEYS[1], ARGV[i + 1])
    added = added + 1
  end
end
return added
