-- The state script, second part (after state.lua, concatenated by script.rs): a key's
-- spec and header, sequences, and the entry `main(KEYS, ARGV)`; the call formats are
-- described at the top of state.lua.

-- ===== a key's spec =====
-- Parsed specs by their id (a 53-bit hash of their bytes, computed by the host), kept
-- by a function library between calls (a plain script parses again each call). A blob
-- starts with `d id, B full`: with full = 1 the spec's bytes follow (parsed if the id
-- is new, else skipped); with full = 0 the event follows at once, and a spec the
-- server does not hold (restarted, the library loaded again, more than 256 specs) is
-- refused before anything is written: the host sends the call again in full
-- (`NOSPEC`). The spec's ~360 bytes a key are not sent on each call: ~1.4 us of a
-- call's time per 750 bytes of arguments, measured (BENCHMARKS.md [18]).
-- Per group (stride S): kind, cols, width, B, D, limit, L, o, W, roff; and check, K,
-- n, the header's formats, the reply's format, the spec's length in the blob.
local SPECS, NSPECS = {}, 0
-- The spec of `blob` (nil when it is sent by id and not held) and where its event starts.
local function spec_of(blob)
  local id, full, pos = unpack_('<dB', blob)
  local G = SPECS[id]
  if G then
    if full == 1 then return G, pos + G.len end
    return G, pos
  end
  if full ~= 1 then return nil end
  local start = pos
  local check, n, K, nq
  check, n, K, nq, pos = unpack_('<I4I2I4I2', blob, pos)
  G = {}
  local nr = 3
  for j = 0, n - 1 do
    local b = S * j
    G[b + 1], G[b + 2], G[b + 3], G[b + 4], G[b + 5], G[b + 6], G[b + 7], G[b + 8], G[b + 9],
      G[b + 10], pos = unpack_(GF, blob, pos)
    local kind, cols = G[b + 1], G[b + 2]
    if kind == 1 then nr = nr + (cols == 1 and 2 or cols == 2 and 3 or 6)
    elseif kind == 2 then nr = nr + 1
    else nr = nr + 2 end
  end
  local Q = {}
  for j = 0, nq - 1 do
    Q[3 * j + 1], Q[3 * j + 2], Q[3 * j + 3], pos = unpack_('<I4I4I4', blob, pos)
  end
  -- The carry section: the other definitions' values' check, their key names'
  -- prefix, the byte runs to copy (carry_keys.rs).
  local cl
  cl, pos = unpack_('<I4', blob, pos)
  if cl > 0 then
    local plen, olen, nc
    G.ccheck, plen, olen, nc, pos = unpack_('<I4I2I2I2', blob, pos)
    G.cpre, G.cplen, pos = string.sub(blob, pos, pos + olen - 1), plen, pos + olen
    local C = {}
    for j = 0, nc - 1 do C[3 * j + 1], C[3 * j + 2], C[3 * j + 3], pos = unpack_('<I4I4I4', blob, pos) end
    G.C, G.nc = C, nc
  end
  if nq > 0 then nr = nr + 1 end -- the key's clock
  G.check, G.K, G.n, G.nq, G.Q, G.len = check, K, n, nq, Q, pos - start
  G.hw = '<c4I4' .. rep('d', K)
  G.rf, G.nr = '<' .. rep('d', nr), nr
  -- The reply's values, kept with the spec and overwritten by each key's call: a table
  -- made per call grew by doubling to ~nr slots, ~1 KB a card of garbage.
  local R = {}
  for x = 1, nr do R[x] = 0 end
  G.R = R
  SPECS[id], NSPECS = G, NSPECS + 1
  return G, pos
end

-- ===== a key's header =====
-- Its values go to a table kept with the spec (G.hv), overwritten by each key's call,
-- not to a new table of K values (~0.8 KB of garbage a card). They are unpacked 8 at a
-- time: a multiple assignment; the one unpack of all K could only fill a new table.
local function header_table(G)
  local hv = G.hv
  if not hv then
    hv = {}
    for x = 1, G.K do hv[x] = 0 end
    G.hv = hv
  end
  return hv
end

-- Its values (false: none to read) and status (0 ok or new, 1 a hash, 2 malformed).
local function load(G)
  local K = G.K
  local hdr = redis.pcall('GETRANGE', KEY, '0', ns(8 * K + 7))
  if type(hdr) == 'table' then return false, 1 end -- a hash: the earlier format
  if hdr == '' then
    if redis.call('EXISTS', KEY) == 0 then return false, 0 end
    return false, 2
  end
  if #hdr ~= 8 * K + 8 then return false, 2 end
  local m, c = unpack_('<c4I4', hdr)
  if m ~= MAGIC or c ~= G.check then return false, 2 end
  local hv, x, p = header_table(G), 1, 9
  while x + 7 <= K do
    hv[x], hv[x + 1], hv[x + 2], hv[x + 3], hv[x + 4], hv[x + 5], hv[x + 6], hv[x + 7], p =
      unpack_('<dddddddd', hdr, p)
    x = x + 8
  end
  while x <= K do hv[x], p = unpack_('<d', hdr, p); x = x + 1 end
  return hv, 0
end

-- Fresh header values.
local function fresh(G)
  local hv = header_table(G)
  for x = 1, G.K do hv[x] = 0 end
  hv[1], hv[2] = NOH, NOH
  for j = 0, G.n - 1 do
    local kind, o = G[S * j + 1], G[S * j + 8]
    if kind ~= 3 then hv[o] = NOH end
    if kind == 1 then hv[o + 1] = NOH end
    if kind == 3 then hv[o + 3] = NOH end
  end
  return hv
end

-- A key without a value, built from the key of the same card under the other
-- definitions of G's carry section, when that one holds their layout: a fresh header
-- with their clock (not the TTL's: set again), every run of theirs copied in (alike
-- windows' header blocks and rings, sequences; the runs come sorted by where they go),
-- zeros between, written with one SET (a SETRANGE a run cost ~1 us each). Whether it was.
local function carry(G)
  local v = redis.pcall('GET', G.cpre .. string.sub(KEY, G.cplen + 1))
  if type(v) ~= 'string' or #v < 16 then return false end
  local m, c = unpack_('<c4I4', v)
  if m ~= MAGIC or c ~= G.ccheck then return false end
  local base = pack(G.hw, MAGIC, G.check, unpack(fresh(G), 1, G.K))
  local out, np, pos, C = {}, 0, 0, G.C
  for j = 0, G.nc - 1 do
    local from, to, n = C[3 * j + 1], C[3 * j + 2], C[3 * j + 3]
    -- A distinct ring's room is written only when used: what the value holds of it.
    if from < #v and n > 0 and to >= pos then
      if pos < #base and pos < to then
        np = np + 1; out[np] = string.sub(base, pos + 1, min(to, #base)); pos = min(to, #base)
      end
      if pos < to then np = np + 1; out[np] = rep('\0', to - pos) end
      local piece = string.sub(v, from + 1, min(#v, from + n))
      np = np + 1; out[np] = piece
      pos = to + #piece
    end
  end
  if pos < #base then np = np + 1; out[np] = string.sub(base, pos + 1) end
  redis.call('SET', KEY, table.concat(out, '', 1, np))
  return true
end

-- ===== sequences (record_seq.rs, step for step) =====
local TWO32, TWO31 = 4294967296, 2147483648
-- An i64 from its two little-endian halves (exact below 2^53).
local function i64(lo, hi)
  if hi >= TWO31 then hi = hi - TWO32 end
  return hi * TWO32 + lo
end
local function i64_bytes(t)
  local hi = floor(t / TWO32)
  return pack('<I4I4', t - hi * TWO32, hi % TWO32)
end
-- The region header: held, start, and the latest time that left (stored xor 2^63).
local function seq_head_bytes(held, start, prev)
  if prev == NOH then return pack('<I4I4I4I4', held, start, 0, 0) end
  local hi = floor(prev / TWO32)
  return pack('<I4I4I4I4', held, start, prev - hi * TWO32, (hi + TWO31) % TWO32)
end
-- Enters an event at t (row value bytes `vals`) into the region at byte `off`: a ring of
-- `rows` rows of `rb` bytes in time order (ties in arrival order); a full ring drops its
-- oldest row, or the event when it is older than every row held. `reg`: the region as
-- read already (nil: read here).
local function seq_push(off, rows, rb, t, vals, reg)
  if not reg then
    -- Not read yet: a row after every row of a ring with room (the usual case) needs
    -- the head and the last row's time only, not the whole region.
    local h = getr(off, 16)
    local held, start, plo, phi = 0, rows, 0, 0
    if #h == 16 then held, start, plo, phi = unpack_('<I4I4I4I4', h) end
    if held < rows and start < rows then
      local last = held > 0 and 17 + ((start + held - 1) % rows) * rb
      if not last or i64(unpack_('<I4I4', getr(off + last - 1, 8))) <= t then
        local prev = NOH
        if plo ~= 0 or phi ~= 0 then prev = i64(plo, (phi + TWO31) % TWO32) end
        setr(off + 16 + ((start + held) % rows) * rb, i64_bytes(t) .. vals)
        setr(off, seq_head_bytes(held + 1, start, prev))
        return
      end
    end
    reg = getr(off, 16 + rows * rb)
  end
  local held, start, plo, phi = unpack_('<I4I4I4I4', reg)
  local prev = NOH
  if plo ~= 0 or phi ~= 0 then prev = i64(plo, (phi + TWO31) % TWO32) end
  if held > rows or start >= rows then held, start, prev = 0, 0, NOH end -- malformed: reset
  local function at(i) return 17 + ((start + i) % rows) * rb end -- logical row i, 1-based
  local function time(i) return i64(unpack_('<I4I4', reg, at(i))) end
  if held >= rows then
    local oldest = time(0)
    if t < oldest then
      setr(off, seq_head_bytes(held, start, max(prev, t)))
      return
    end
    prev = max(prev, oldest)
    start, held = (start + 1) % rows, held - 1
  end
  local p = held
  while p > 0 and time(p - 1) > t do p = p - 1 end
  local row = i64_bytes(t) .. vals
  if p == held then
    setr(off + at(p) - 1, row) -- in order: one row written
  else
    -- Late: rows p .. held - 1 move up one slot; the ring written back whole.
    local slots = {}
    for j = 0, rows - 1 do slots[j] = string.sub(reg, 17 + j * rb, 16 + (j + 1) * rb) end
    for i = held, p + 1, -1 do
      slots[(start + i) % rows] = slots[(start + i - 1) % rows]
    end
    slots[(start + p) % rows] = row
    setr(off + 16, table.concat(slots, '', 0, rows - 1))
  end
  setr(off, seq_head_bytes(held + 1, start, prev))
end

-- Whether KEY holds a value of spec G's layout (its magic and check).
local function holds(G)
  local h = redis.pcall('GETRANGE', KEY, '0', '7')
  if type(h) == 'table' or #h ~= 8 then return false end
  local m, c = unpack_('<c4I4', h)
  return m == MAGIC and c == G.check
end

-- Rows held by the host ("q" blobs) entered into KEYS[from..to], each blob ARGV[2 + k]
-- (a function of the chunk, not of `main`: a nested one is a new closure every call).
local function enter_rows(KEYS, ARGV, from, to)
  for k = from, to do
    KEY = KEYS[k]
    local blob = ARGV[2 + k]
    local G, at = spec_of(blob)
    -- A key reset or expired since its read: the row is not entered.
    if holds(G) then
      local te, pos = unpack_('<d', blob, at)
      local Q = G.Q
      for j = 0, G.nq - 1 do
        local rb = Q[3 * j + 3]
        if string.byte(blob, pos) == 1 then
          seq_push(Q[3 * j + 1], Q[3 * j + 2], rb, te, string.sub(blob, pos + 1, pos + rb - 8))
        end
        pos = pos + 1 + rb - 8
      end
    end
  end
end

-- ===== the script =====
local function main(KEYS, ARGV)
if not NOH then bind() end
local mode = ARGV[1]

if mode == 'l' then
  local te, delta = unpack_('<dd', ARGV[2])
  KEY = KEYS[1]
  local G = spec_of(ARGV[3])
  local hv = load(G)
  if not hv then return 0 end
  local reached = 0
  for j = 0, G.n - 1 do
    local b = S * j
    if G[b + 1] == 4 then
      local L, o, roff = G[b + 7], G[b + 8], G[b + 10]
      local eb = floor(te / G[b + 3])
      if inring(hv[o], eb, L) then
        reached = reached + 1
        local i = eb % L
        if has(hv, o + 1, i) then
          local t, f = unpack_('<I4I4', getr(roff + 8 * i, 8))
          local f2 = min(max(f + delta, 0), t)
          if f2 ~= f then setr(roff + 8 * i, pack('<I4I4', t, f2)) end
        end
      end
    end
  end
  return reached
end

-- Every key's spec held before anything is written (one sent by id may not be). The
-- specs are dropped here, at a call's start, past 256 (never between a call's check and
-- its use of one).
if NSPECS >= 256 then SPECS, NSPECS = {}, 0 end
for k = 1, #KEYS do
  if not spec_of(ARGV[2 + k]) then
    return redis.error_reply('NOSPEC the state script does not hold a spec sent by id')
  end
end

if mode == 'q' then
  enter_rows(KEYS, ARGV, 1, #KEYS)
  return 1
end

-- "u<c>": the first c keys carry rows held by the host, entered before this call's reads.
local carried = 0
if #mode > 1 and string.byte(mode, 1) == 117 then
  carried = tonumber(string.sub(mode, 2))
  if not carried or carried < 0 or carried > #KEYS then return redis.error_reply('bad mode') end
  mode = 'u'
  enter_rows(KEYS, ARGV, 1, carried)
end

local ts, lateness, ttl = unpack_('<ddd', ARGV[2])
local replies = {}
for k = carried + 1, #KEYS do
  KEY = KEYS[k]
  local blob = ARGV[2 + k]
  local G, at = spec_of(blob)
  local hv, status = load(G)
  local built = false
  if not hv and status == 0 and G.C and mode == 'u' and carry(G) then
    hv, status = load(G)
    built = true
  end
  local te_o, pos = unpack_('<d', blob, at)
  local te, late
  if mode == 'o' then
    if hv then te, late = te_o, 0 end
  else
    if status ~= 0 then redis.call('DEL', KEY) end
    if not hv then hv = fresh(G) end
    local clock = max(hv[1], ts)
    hv[1] = clock
    if clock - ts <= lateness then te, late = ts, 0 else te, late = clock, 1 end
  end
  if te then
    local clock = hv[1]
    local R, x = G.R, 3
    R[1], R[2], R[3] = te, late, 0
    for j = 0, G.n - 1 do
      local b = S * j
      local kind, cols, w, B = G[b + 1], G[b + 2], G[b + 3], G[b + 4]
      local L, o, W, roff = G[b + 7], G[b + 8], G[b + 9], G[b + 10]
      local flags, val, h
      flags, val, h, pos = unpack_('<Bdd', blob, pos)
      local run = flags % 2 == 1
      local hb, eb = floor(clock / w), floor(te / w)
      local add = flags % 8 >= 6
      if kind == 1 then
        local rn, rsum, rq, mn, mx, last
        if not run then rn, rsum, rq, mn, mx, last = 0, 0, 0, NAN, NAN, NOH
        elseif cols == 3 then
          rn, rsum, rq, mn, mx, last = g_full(hv, L, o, W, roff, hb, eb, hb - B, te, add, val)
        else rn, rsum, last = g_count_sum(hv, cols, L, o, W, roff, hb, eb, te, add, val) end
        if cols == 1 then R[x + 1], R[x + 2], x = rn, last, x + 2
        elseif cols == 2 then R[x + 1], R[x + 2], R[x + 3], x = rn, rsum, last, x + 3
        else
          R[x + 1], R[x + 2], R[x + 3], R[x + 4], R[x + 5], R[x + 6] = rn, rsum, rq, mn, mx, last
          x = x + 6
        end
      elseif kind == 2 then
        local last = hv[o]
        if run and add and te > last then hv[o] = te end
        R[x + 1], x = run and last or NOH, x + 1
      elseif kind == 3 then
        local before, after, bad = 0, 0, false
        if run then
          before, after, bad = g_distinct(hv, G[b + 6], L, o, W, roff, hb, eb, hb - B, add, h)
        end
        if bad then status = 2 end
        R[x + 1], R[x + 2], x = before, after, x + 2
      else
        local t, f = 0, 0
        if run then t, f = g_label(hv, B, G[b + 5], L, o, W, roff, hb, eb, add) end
        R[x + 1], R[x + 2], x = t, f, x + 2
      end
    end
    if built and status == 0 then status = 3 end
    R[3] = status
    local refresh = ttl > 0 and not (clock - hv[2] < TTL_SLACK)
    if refresh then hv[2] = clock end
    setr(0, pack(G.hw, MAGIC, G.check, unpack(hv, 1, G.K)))
    if refresh then redis.call('PEXPIRE', KEY, ns(ttl)) end
    if mode == 'u' then
      if G.nq == 0 then
        replies[k - carried] = pack(G.rf, unpack(R, 1, G.nr))
      else
        R[x + 1] = clock
        local parts, Q = { pack(G.rf, unpack(R, 1, G.nr)) }, G.Q
        for j = 0, G.nq - 1 do
          local off, rows, rb = Q[3 * j + 1], Q[3 * j + 2], Q[3 * j + 3]
          local reg = getr(off, 16 + rows * rb)
          parts[j + 2] = reg
          -- An early row (known before this call): entered after its region was read.
          if string.byte(blob, pos) == 1 then
            seq_push(off, rows, rb, te, string.sub(blob, pos + 1, pos + rb - 8), reg)
          end
          pos = pos + 1 + rb - 8
        end
        replies[k - carried] = table.concat(parts)
      end
    end
  elseif mode == 'u' then
    replies[k - carried] = false
  end
end
if mode == 'o' then return 1 end
return replies
end
