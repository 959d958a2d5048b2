-- cancel.lua: set the monotonic cancel flag and its reason, and append its events; no
-- version change, so a commit read before the flag still succeeds and ORs it in. Uses
-- _lib.lua.
--
-- KEYS[1]  ns:{T}:h:<id>            header
-- KEYS[2]  ns:{T}:runnable          runnable index of the tag (a cancel-requested turn is runnable)
-- KEYS[3]  ns:{T}:ev:<root>         the tree's event stream
-- KEYS[4]  ns:{T}:ev:<root>:end     its end marker (never set here)
--
-- ARGV[1]  turn id
-- ARGV[2]  reason (JSON: a string or null)
-- ARGV[3]  request id (a replay answers OK)
-- ARGV[4]  number of events e
-- ARGV[5]  stream length bound (approximate MAXLEN; '0': number the events, stream none)
-- ARGV[6..5+e]  event documents (numbered here from the turn's counter)
--
-- Returns {'OK', first event number} | {'NO'} (terminal, or the flag was already set) |
--         {'NOT_FOUND', id} | {'CORRUPT', id, why}
local f, err = writable(KEYS[1], ARGV[1])
if not f then return err end
if TERMINAL[f.st] then return {'NO'} end
if f.cx == '1' then
  if f.crid == ARGV[3] then return {'OK', f.evf} end
  return {'NO'}
end
redis.call('HSET', KEYS[1], 'cx', '1', 'cr', ARGV[2], 'crid', ARGV[3])
place(KEYS[2], ARGV[1], f.st, '1', f.nra, f.lu, clock(), f.open, f.q)
local first = append_events(KEYS[1], KEYS[3], KEYS[4], documents(6, tonumber(ARGV[4])),
                            ARGV[5], 0, '0', f.ev)
return {'OK', first}
