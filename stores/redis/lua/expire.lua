-- expire.lua: delete one terminal turn (retention), unless a waiting parent still
-- references it or one of its children is still live. Uses _lib.lua.
--
-- KEYS[1]  ns:{T}:h:<id>        header
-- KEYS[2]  ns:{T}:m:<id>        messages
-- KEYS[3]  ns:{T}:k:<id>        its children list
-- KEYS[4]  ns:{T}:ended         terminal turns of the tag
-- KEYS[5]  ns:{T}:waits         parents waiting for children
-- KEYS[6]  ns:{T}:live          non-terminal turns of the tag
-- KEYS[7]  ns:{T}:leases        lease expiries of the tag
-- KEYS[8]  ns:{T}:k:<parent>    the parent's children list (own list for a root)
--
-- ARGV[1]  turn id
-- ARGV[2]  its parent id as the caller read it ('' for a root)
--
-- Returns {'OK'} | {'NO', why} | {'NOT_FOUND', id} | {'CORRUPT', id, why}
local id = ARGV[1]
local f, err = read(KEYS[1], id)
if not f then
  if err[1] == 'NOT_FOUND' then redis.call('ZREM', KEYS[4], id) end
  return err
end
if not TERMINAL[f.st] then return {'NO', 'not terminal'} end
if f.par ~= ARGV[2] then return {'NO', 'parent differs'} end
if f.par ~= '' then
  local waited = redis.call('HGET', KEYS[5], f.par)
  if waited then
    local parsed, ids = pcall(cjson.decode, waited)
    if not parsed or type(ids) ~= 'table' then return {'NO', 'parent wait list unreadable'} end
    for _, child in ipairs(ids) do
      if child == id then return {'NO', 'a waiting parent references it'} end
    end
  end
end
for _, child in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
  if redis.call('ZSCORE', KEYS[6], child) then return {'NO', 'a child is live'} end
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('ZREM', KEYS[4], id)
redis.call('HDEL', KEYS[7], id)
if f.par ~= '' then redis.call('LREM', KEYS[8], 0, id) end
return {'OK'}
