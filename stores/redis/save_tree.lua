-- save_tree.lua: update a parent and create its children in one atomic write; everything
-- is checked before the first write. Uses _lib.lua.
--
-- KEYS[1..6]   the tag's runnable, live, ended, waits, leases and conv keys (see create.lua)
-- KEYS[7]      ns:{T}:h:<parent>   parent header
-- KEYS[8]      ns:{T}:m:<parent>   parent messages
-- KEYS[9]      ns:{T}:k:<parent>   parent's children list
-- KEYS[7+3i..9+3i]  for child i (1-based): its header, its messages, the parent's
--                   children list again
--
-- ARGV[1]      request id (a replay answers OK)
-- ARGV[2]      number of children
-- ARGV[3..]    the parent's block (see create.lua) and its new messages, then each
--              child's block and messages, then optionally a worker id and lease id
--              whose lease the same write gives back (see save.lua)
--
-- Returns the replies of save.lua, and for a child the CONFLICT/CORRUPT of create.lua.
local T = tag_keys()
local rid = ARGV[1]
local parent = block(3)
local prev, err, replay = check_update(KEYS[7], parent, rid)
if not prev then return err end
if replay then
  local last = parent.next
  for i = 1, tonumber(ARGV[2]) do last = block(last).next end
  local asked = ARGV[last] and ARGV[last] ~= ''
  return {'OK', prev.v, prev.cx, asked and '1' or '0'}
end
local children = {}
local at = parent.next
for i = 1, tonumber(ARGV[2]) do
  local child = block(at)
  local base = 7 + 3 * i
  local ok, cerr, again = check_create(T, KEYS[base], child, rid)
  if not ok then return cerr end
  if again then return {'CONFLICT', child.id, '-1', ok.v} end
  children[i] = {child, {KEYS[base], KEYS[base + 1], KEYS[base + 2]}}
  at = child.next
end
local now = clock()
local v, cx = write(T, {KEYS[7], KEYS[8], KEYS[9]}, parent, prev, rid, now)
for _, c in ipairs(children) do write(T, c[2], c[1], nil, rid, now) end
return {'OK', v, cx, release_after(T, KEYS[7], parent, prev, cx, at, now)}
