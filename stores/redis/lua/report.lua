-- report.lua: an ended child reports its result to its waiting parent (what the child's
-- terminal commit does; for records whose report never happened). Uses _lib.lua.
--
-- KEYS[1..6]  the tag's runnable, live, ended, waits, leases and conv keys
-- KEYS[7]     ns:{T}:h:<child>    the child's header
-- KEYS[8]     ns:{T}:h:<parent>   the parent's header
--
-- ARGV[1]  child id
-- ARGV[2]  the child's result (JSON)
--
-- Returns {'OK', parent woken '1'/'0'} | {'NO'} (not ended, or no parent) |
--         {'NOT_FOUND', id} | {'CORRUPT', id, why}
local T = tag_keys()
local f, err = read(KEYS[7], ARGV[1])
if not f then return err end
if not TERMINAL[f.st] or f.par == '' then return {'NO'} end
return {'OK', fan_in(T, KEYS[8], f.par, ARGV[1], ARGV[2], clock())}
