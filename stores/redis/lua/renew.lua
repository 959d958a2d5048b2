-- renew.lua: extend a live lease held by this worker and lease id; no version change.
-- Uses _lib.lua. Safe to run twice (the second run extends to the same time).
--
-- KEYS[1]  ns:{T}:h:<id>      header
-- KEYS[2]  ns:{T}:runnable    runnable index of the tag
-- KEYS[3]  ns:{T}:leases      lease expiries of the tag
--
-- ARGV[1]  turn id
-- ARGV[2]  worker id
-- ARGV[3]  lease id
-- ARGV[4]  now (store clock)
-- ARGV[5]  the new lease expiry
--
-- Returns {'OK'} | {'NO'} (not the holder, or the lease expired) | {'NOT_FOUND', id} |
--         {'CORRUPT', id, why}
local f, err = read(KEYS[1], ARGV[1])
if not f then return err end
if f.lo ~= ARGV[2] or f.lid ~= ARGV[3] then return {'NO'} end
if f.lu == '' or tonumber(f.lu) <= tonumber(ARGV[4]) then return {'NO'} end
redis.call('HSET', KEYS[1], 'lu', ARGV[5])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[5])
place(KEYS[2], ARGV[1], f.st, f.cx, f.nra, ARGV[5], clock(), f.open, f.q)
return {'OK'}
