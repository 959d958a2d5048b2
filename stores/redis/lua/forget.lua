-- forget.lua: wake-ups marked queued before a time may have been lost with the broker's
-- connection: clear those marks in one tag, so the sweeper's lost-wake-up rule applies to
-- those turns again (from now). Uses _lib.lua.
--
-- KEYS[1]  ns:{T}:runnable   runnable index of the tag
--
-- ARGV[1]  the namespace's header key prefix up to the id (ns:{T}:h:)
-- ARGV[2]  marks whose trusted-until time is at most this were set before the gap
--
-- Returns the number of marks cleared.
local now = clock()
local marked = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, ARGV[2])
local cleared = 0
for _, id in ipairs(marked) do
  local hkey = ARGV[1] .. id
  local q = redis.call('HGET', hkey, 'q')
  if q and q ~= '' and tonumber(q) <= tonumber(ARGV[2]) then
    local f = writable(hkey, id)
    if f then
      mark_queued(KEYS[1], hkey, id, '', now)
      cleared = cleared + 1
    end
  end
end
return cleared
