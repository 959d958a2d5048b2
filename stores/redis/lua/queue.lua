-- queue.lua: mark a turn's wake-up as queued until a time, or clear the mark (the
-- dispatch failed). The sweeper re-sends a wake-up only once its mark has run out. Uses
-- _lib.lua. A quarantined turn is left alone (CORRUPT): neither mark nor unmark indexes it.
--
-- KEYS[1]  ns:{T}:runnable   runnable index of the tag
-- KEYS[2]  ns:{T}:h:<id>     header
--
-- ARGV[1]  turn id
-- ARGV[2]  seconds the queued wake-up is trusted, or '' to clear the mark
--
-- Returns {'OK'} | {'NOT_FOUND', id} | {'CORRUPT', id, why}
local f, err = writable(KEYS[2], ARGV[1])
if not f then return err end
local now = clock()
local till = ''
if ARGV[2] ~= '' then till = tostring(tonumber(now) + tonumber(ARGV[2])) end
mark_queued(KEYS[1], KEYS[2], ARGV[1], till, now)
return {'OK'}
