-- _lib.lua: helpers shared by the write and claim scripts. Not a script on its own:
-- scripts.py prepends `local SCHEMA = '<record version>'` (the version written) and
-- `local READABLE = {...}` (every version read: older records are migrated when the worker
-- parses them) and this file to the scripts that use it, so each script stays one atomic
-- EVALSHA.
--
-- Conventions: every number a script stores arrives as a string from Python (exact
-- floats, no Lua %.14g rounding); the server clock comes from TIME as an exact string;
-- replies start with a code: OK, NO, NOT_FOUND, CONFLICT, BUSY, MISMATCH, REWRITTEN,
-- CORRUPT.

local TERMINAL = {
  COMPLETED = true, FAILED = true, CANCELLED = true,
  MAX_ITERATIONS_REACHED = true, MAX_STEPS_REACHED = true, BUDGET_EXCEEDED = true,
}
local KNOWN = {
  READY = true, RUNNING = true, WAITING_FOR_USER = true, WAITING_FOR_APPROVAL = true,
  WAITING_FOR_CHILD = true, RETRY_SCHEDULED = true,
}
for name in pairs(TERMINAL) do KNOWN[name] = true end

-- The server clock, seconds since the epoch, as an exact decimal string.
local function clock()
  local t = redis.call('TIME')
  return t[1] .. '.' .. string.format('%06d', tonumber(t[2]))
end

local FIELDS = {'sv', 'v', 'st', 'cx', 'cr', 'lo', 'lid', 'lu', 'nra', 'rid', 'n', 'last',
                'par', 'crid', 'rrid', 'wait', 'open', 'ev', 'evf', 'cw', 'rel', 'q', 'qr'}

-- The control fields of a stored turn; nil and an error reply if absent or unreadable.
local function read(key, id)
  local values = redis.pcall('HMGET', key, unpack(FIELDS))
  if values['err'] then return nil, {'CORRUPT', id, 'header is not a hash'} end
  local f = {}
  for i, name in ipairs(FIELDS) do f[name] = values[i] or '' end
  if f.sv == '' and f.v == '' and f.st == '' then return nil, {'NOT_FOUND', id} end
  if not READABLE[f.sv] then return nil, {'CORRUPT', id, 'unknown record version ' .. f.sv} end
  f.version = tonumber(f.v)
  if not f.version or f.st == '' or not tonumber(f.n) then
    return nil, {'CORRUPT', id, 'header lacks version, status or count'}
  end
  if not KNOWN[f.st] then return nil, {'CORRUPT', id, 'unknown status ' .. f.st} end
  return f
end

-- read() for a script that would change the turn or put it in an index: a quarantined
-- turn (quarantine.lua wrote its reason, qr, with the tag's quarantine set) is refused.
local function writable(key, id)
  local f, err = read(key, id)
  if f and f.qr ~= '' then return nil, {'CORRUPT', id, 'quarantined: ' .. f.qr} end
  return f, err
end

-- Since when a turn is runnable (its score in the runnable index), or nil if it is not.
-- open: how many awaited children have not reported ('0': a woken parent). A leased turn
-- scores its lease expiry; a turn with a queued wake-up (q) scores the time until which
-- that wake-up is trusted: the sweeper looks at neither before then.
local function runnable_since(st, cx, nra, lu, now, open, q)
  if TERMINAL[st] then return nil end
  local since
  if cx == '1' or st == 'READY' or st == 'RUNNING' then
    since = now
  elseif st == 'WAITING_FOR_CHILD' and open == '0' then
    since = now
  elseif st == 'RETRY_SCHEDULED' then
    since = (nra ~= '' and nra) or now
  else
    return nil
  end
  if lu ~= '' and tonumber(lu) > tonumber(since) then since = lu end
  if q and q ~= '' and tonumber(q) > tonumber(since) then since = q end
  return since
end

-- Put a turn where its state says in the runnable index.
local function place(runnable, id, st, cx, nra, lu, now, open, q)
  local since = runnable_since(st, cx, nra, lu, now, open, q)
  if since then
    redis.call('ZADD', runnable, since, id)
  else
    redis.call('ZREM', runnable, id)
  end
end

-- KEYS[1..6]: the tag's runnable, live, ended, waits, leases and conversation keys.
local function tag_keys()
  return {runnable = KEYS[1], live = KEYS[2], ended = KEYS[3], waits = KEYS[4],
          leases = KEYS[5], conv = KEYS[6]}
end

-- A turn block in ARGV starting at i: these fields, then k message documents. ca and root
-- are written by a creation only (an update sends them empty).
local BLOCK = {'id', 'exp', 'body', 'st', 'nra', 'cx', 'cr', 'bn', 'blast', 'nlast', 'wait',
               'ua', 'ca', 'par', 'root', 'conv', 'agent', 'k'}

local function block(i)
  local b = {}
  for j, name in ipairs(BLOCK) do b[name] = ARGV[i + j - 1] end
  b.k = tonumber(b.k)
  b.first = i + #BLOCK
  b.next = b.first + b.k
  return b
end

-- Why the stored message list is not the one the header describes, or nil. A writer
-- whose messages come from its process's cache never read the stored list, so the list
-- is checked where it is cheap: its length against the count, and its last document
-- against the last id (every document opens with its id: messages declare it first).
-- full: every document must open with an id and close its object, once per turn, when a
-- commit ends it (nothing reads a terminal record back whole). The documents are not
-- parsed: an edit that keeps a document well-formed is not seen.
local OPEN = '{"id":"'
local function spoiled(mkey, f, full)
  local n = tonumber(f.n)
  local len = redis.pcall('LLEN', mkey)
  if type(len) ~= 'number' then return 'the message list is not a list' end
  if len ~= n then return 'the message list holds ' .. len .. ', the header says ' .. n end
  if n == 0 then return nil end
  local last = redis.call('LINDEX', mkey, -1)
  local head = OPEN
  if string.find(f.last, '^[%w%-_.:]*$') then head = OPEN .. f.last .. '"' end
  if string.sub(last, 1, #head) ~= head then
    return 'the last stored message is not ' .. f.last
  end
  if not full then return nil end
  for i = 0, n - 1, 1000 do
    local docs = redis.call('LRANGE', mkey, i, math.min(i + 999, n - 1))
    for j, doc in ipairs(docs) do
      if string.sub(doc, 1, #OPEN) ~= OPEN or string.sub(doc, -1) ~= '}' then
        return 'stored message ' .. (i + j - 1) .. ' is not a message document'
      end
    end
  end
  return nil
end

-- Checks for an update; returns the stored fields (and true for a replayed commit). The
-- stored messages are checked too (every one of them when the update ends the turn: a
-- terminal record is never read back whole by a worker again).
local function check_update(hkey, mkey, b, rid)
  local f, err = writable(hkey, b.id)
  if not f then return nil, err end
  local expected = tonumber(b.exp)
  if f.version ~= expected then
    if f.rid == rid and f.version == expected + 1 then return f, nil, true end
    return nil, {'CONFLICT', b.id, b.exp, f.v}
  end
  if tonumber(f.n) ~= tonumber(b.bn) then return nil, {'MISMATCH', b.id, f.n, f.last} end
  if f.last ~= b.blast then return nil, {'REWRITTEN', b.id, f.n, f.last} end
  local why = spoiled(mkey, f, TERMINAL[b.st])
  if why then return nil, {'CORRUPT', b.id, why} end
  return f
end

-- Checks for a creation, incl. the busy check of a conversation root.
local function check_create(T, hkey, b, rid)
  if redis.call('EXISTS', hkey) == 1 then
    local f, err = read(hkey, b.id)
    if not f then return nil, err end
    if f.rid == rid and f.version == 0 then return f, nil, true end
    return nil, {'CONFLICT', b.id, '-1', f.v}
  end
  if b.conv ~= '' then
    local active = redis.call('HMGET', T.conv, 'turn', 'st')
    if active[1] and active[2] and not TERMINAL[active[2]] then
      return nil, {'BUSY', active[1], active[2]}
    end
  end
  return {}
end

-- The writer must hold the stored lease (worker, lease id) or, without one, meet no live
-- lease: no write from anyone but the live lease's owner.
local function check_writer(f, id, worker, lid, now)
  if worker ~= '' then
    if f.lo ~= worker or f.lid ~= lid then return {'LEASE_LOST', id, lid, worker, f.lo} end
  elseif f.lu ~= '' and tonumber(f.lu) > tonumber(now) then
    return {'LEASED', id, f.lo, f.lu, now}
  end
  return nil
end

local function falsy(json_text)
  return json_text == '' or json_text == 'null' or json_text == '""'
end

-- A JSON list of ids as a Lua list ({} if empty or unreadable).
local function id_list(json_text)
  if json_text == nil or json_text == '' then return {} end
  local ok, ids = pcall(cjson.decode, json_text)
  if not ok or type(ids) ~= 'table' then return {} end
  return ids
end

-- After a write of b: keep only the reported results (r:<child id>) of children b still
-- waits on; the waits index lists the ones that have not reported. Returns the open count
-- ('' when b waits on nothing).
local function settle_waits(T, hkey, b)
  local waiting = {}
  for _, id in ipairs(id_list(b.wait)) do waiting['r:' .. id] = true end
  for _, field in ipairs(redis.call('HKEYS', hkey)) do
    if string.sub(field, 1, 2) == 'r:' and not waiting[field] then
      redis.call('HDEL', hkey, field)
    end
  end
  if b.wait == '' or TERMINAL[b.st] then
    redis.call('HDEL', T.waits, b.id)
    redis.call('HDEL', hkey, 'open')
    return ''
  end
  local open = {}
  for _, id in ipairs(id_list(b.wait)) do
    if redis.call('HEXISTS', hkey, 'r:' .. id) == 0 then open[#open + 1] = id end
  end
  if #open > 0 then
    redis.call('HSET', T.waits, b.id, cjson.encode(open))
  else
    redis.call('HDEL', T.waits, b.id)
  end
  redis.call('HSET', hkey, 'open', #open)
  return tostring(#open)
end

-- Index a written turn: runnable, live/ended, waits, conversation marker. prev: the
-- stored fields before the write (nil: a creation). A turn that waits on no child and did
-- not before has no results, waits entry or open count to settle (each write settles them).
local function index(T, hkey, b, cx, lu, now, prev)
  local open, q = '', ''
  if prev then q = prev.q end
  if b.wait ~= '' or (prev and (prev.wait ~= '' or prev.open ~= '')) then
    open = settle_waits(T, hkey, b)
  end
  if TERMINAL[b.st] then
    redis.call('ZREM', T.runnable, b.id)
    redis.call('ZREM', T.live, b.id)
    redis.call('ZADD', T.ended, 'NX', now, b.id)
    if b.conv ~= '' and redis.call('HGET', T.conv, 'turn') == b.id then
      redis.call('DEL', T.conv)
    end
    return
  end
  place(T.runnable, b.id, b.st, cx, b.nra, lu, now, open, q)
  if b.conv ~= '' and redis.call('HGET', T.conv, 'turn') == b.id then
    redis.call('HSET', T.conv, 'st', b.st)
  end
end

-- Write a checked block: prev is the stored fields, or nil to create.
-- The store owns lease and cancel flag: a write keeps the lease and ORs the flag.
local function write(T, keys, b, prev, rid, now)
  local hkey, mkey, kkey = keys[1], keys[2], keys[3]
  local v, cx, cr, lu = 0, b.cx, b.cr, ''
  if prev then
    v = prev.version + 1
    if prev.cx == '1' then cx = '1' end
    if not falsy(prev.cr) then cr = prev.cr end
    lu = prev.lu
  end
  -- sv on every write: the body is written in the current schema, an older record's too
  redis.call('HSET', hkey, 'sv', SCHEMA, 'v', v, 'st', b.st, 'body', b.body, 'nra', b.nra,
             'cx', cx, 'cr', cr, 'n', tonumber(b.bn) + b.k, 'last', b.nlast, 'rid', rid,
             'ua', b.ua, 'wait', b.wait, 'agent', b.agent)
  if not prev then
    redis.call('HSET', hkey, 'ca', b.ca, 'par', b.par, 'root', b.root, 'conv', b.conv, 'ev', 0)
    if not TERMINAL[b.st] then redis.call('ZADD', T.live, b.ca, b.id) end
    if b.par ~= '' then redis.call('RPUSH', kkey, b.id) end
    if b.conv ~= '' and not TERMINAL[b.st] then
      redis.call('HSET', T.conv, 'turn', b.id, 'st', b.st)
    end
  end
  for i = b.first, b.next - 1, 1000 do
    redis.call('RPUSH', mkey, unpack(ARGV, i, math.min(i + 999, b.next - 1)))
  end
  index(T, hkey, b, cx, lu, now, prev)
  return v, cx
end

-- n event documents from ARGV[at] on, as a list.
local function documents(at, n)
  local docs = {}
  for i = 1, n do docs[i] = ARGV[at + i - 1] end
  return docs
end

-- Append the event documents docs to the tree's stream, numbered from the turn's counter
-- ev (the stored 'ev', read here if nil); ends: the root ended, so mark the stream's end and
-- let both expire after ttl. maxlen '0': number them only (streaming is off). Returns the
-- first number.
local function append_events(hkey, stream, endkey, docs, maxlen, ttl, ends, ev)
  if ev == nil then ev = redis.call('HGET', hkey, 'ev') end
  ev = tonumber(ev or '0') or 0
  local first, n = ev + 1, #docs
  if n == 0 then return first end
  redis.call('HSET', hkey, 'ev', ev + n, 'evf', first)
  if maxlen == '0' then return first end
  local last_id
  for i = 1, n do
    ev = ev + 1
    last_id = redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*', 'seq', ev,
                         'event', docs[i])
  end
  if ends == '1' then
    redis.call('SET', endkey, last_id, 'EX', ttl)
    redis.call('EXPIRE', stream, ttl)
  end
  return first
end

-- An ended child reports to its parent: its result lands in the parent's header (r:<id>)
-- if the parent waits on it; the last one to report makes the parent runnable. The
-- parent's own state (version, body) is untouched: it settles in its own next step.
-- Returns '1' if this woke the parent.
local function fan_in(T, phkey, parent_id, child_id, result, now)
  local ids = id_list(redis.call('HGET', T.waits, parent_id))
  local left, found = {}, false
  for _, id in ipairs(ids) do
    if id == child_id then found = true else left[#left + 1] = id end
  end
  if not found then return '0' end
  redis.call('HSET', phkey, 'r:' .. child_id, result, 'open', #left)
  if #left > 0 then
    redis.call('HSET', T.waits, parent_id, cjson.encode(left))
    return '0'
  end
  redis.call('HDEL', T.waits, parent_id)
  local p = redis.call('HMGET', phkey, 'st', 'cx', 'nra', 'lu', 'q', 'qr')
  if p[6] then return '0' end  -- quarantined: nothing wakes it
  place(T.runnable, parent_id, p[1] or '', p[2] or '', p[3] or '', p[4] or '', now, '0', p[5])
  return '1'
end

-- A wake-up for the turn is (or is about to be) queued: mark it until `till` (the sweeper
-- re-sends it only after that), or clear the mark (till = ''). Only a turn a wake-up can
-- serve is marked: READY, RUNNING, cancel requested, a due retry or a woken parent; never
-- one leased. A quarantined turn is left alone (clearing its mark must not index it again).
local function mark_queued(runnable, hkey, id, till, now)
  local f = redis.call('HMGET', hkey, 'st', 'cx', 'nra', 'lu', 'open', 'qr')
  if f[6] then return end
  local st, cx, nra, open, lu = f[1] or '', f[2] or '', f[3] or '', f[5] or '', f[4] or ''
  if till == '' then
    redis.call('HDEL', hkey, 'q')
  else
    local due = st == 'RETRY_SCHEDULED' and (nra == '' or tonumber(nra) <= tonumber(now))
    local wakeable = st == 'READY' or st == 'RUNNING' or cx == '1' or due
      or (st == 'WAITING_FOR_CHILD' and open == '0')
    if TERMINAL[st] or not wakeable or (lu ~= '' and tonumber(lu) > tonumber(now)) then
      return
    end
    redis.call('HSET', hkey, 'q', till)
  end
  place(runnable, id, st, cx, nra, lu, now, open, till)
end
