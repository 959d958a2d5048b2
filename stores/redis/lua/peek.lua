-- peek.lua: the control fields a runner re-reads before side effects, and the server
-- clock, in one round trip. Read-only. Uses _lib.lua.
--
-- KEYS[1]  ns:{T}:h:<id>   header
--
-- ARGV[1]  turn id
--
-- Returns {'OK', version, status, cancel flag, lease owner, lease id, lease until,
--          TIME seconds, TIME microseconds} | {'NOT_FOUND', id} | {'CORRUPT', id, why}
local f, err = read(KEYS[1], ARGV[1])
if not f then return err end
local t = redis.call('TIME')
return {'OK', f.v, f.st, f.cx, f.lo, f.lid, f.lu, t[1], t[2]}
