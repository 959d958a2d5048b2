-- release.lua: drop the lease held by this worker and lease id; no version change.
-- Uses _lib.lua. The request id makes a replay answer OK.
--
-- KEYS[1]  ns:{T}:h:<id>      header
-- KEYS[2]  ns:{T}:runnable    runnable index of the tag
-- KEYS[3]  ns:{T}:leases      lease expiries of the tag
--
-- ARGV[1]  turn id
-- ARGV[2]  worker id
-- ARGV[3]  lease id
-- ARGV[4]  request id
--
-- Returns {'OK'} | {'NO'} (not the holder) | {'NOT_FOUND', id} | {'CORRUPT', id, why}
local f, err = read(KEYS[1], ARGV[1])
if not f then return err end
if f.lo == ARGV[2] and f.lid == ARGV[3] then
  redis.call('HDEL', KEYS[1], 'lo', 'lid', 'lu')
  redis.call('HSET', KEYS[1], 'rrid', ARGV[4])
  redis.call('HDEL', KEYS[3], ARGV[1])
  place(KEYS[2], ARGV[1], f.st, f.cx, f.nra, '', clock(), f.open, f.q)
  return {'OK'}
end
if f.rrid == ARGV[4] then return {'OK'} end
return {'NO'}
