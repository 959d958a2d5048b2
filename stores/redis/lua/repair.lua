-- repair.lua: in one tag, children that ended while their parent still waits on them (a
-- crash between the child's last save and the parent's fan-in). Read-only.
--
-- KEYS[1]  ns:{T}:waits   parent id -> JSON list of the child ids it waits on
-- KEYS[2]  ns:{T}:ended   terminal turns of the tag
--
-- ARGV[1]  most pairs to return
--
-- Returns {child id, parent id, child id, parent id, ...}
local limit = tonumber(ARGV[1])
local found = {}
local waits = redis.call('HGETALL', KEYS[1])
for i = 1, #waits, 2 do
  local parsed, ids = pcall(cjson.decode, waits[i + 1])
  if parsed and type(ids) == 'table' then
    for _, child in ipairs(ids) do
      if #found >= 2 * limit then return found end
      if redis.call('ZSCORE', KEYS[2], child) then
        found[#found + 1] = child
        found[#found + 1] = waits[i]
      end
    end
  end
end
return found
