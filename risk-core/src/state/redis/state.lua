-- risk entity state on Redis: every key of one decision, read and updated atomically.
-- The arithmetic is that of risk-core/src/state/group.rs, ring.rs and distinct.rs, step
-- for step (bucket rings, running totals, the key's clock, lateness, the 52-bit
-- HyperLogLog), so that the Redis store and the in-process store give the same features.
--
-- Each key is one Redis string of fixed layout (little-endian; script.rs writes the blobs):
--   "RSK" 0x01 | clock (d) | per group of the key's source, in order: len (I4) | payload
--   stats, count column:  head d, last d, total n I4        | L x (n I4)
--   stats, count + sum:   head d, last d, total n I4, sum d | L x (n I4, sum d)
--   stats, every column:  head d, last d                    | L x (n I4, min f, max f, sum d, sumsq d)
--   last:                 last d
--   label:                head d                            | L x (txns I4, frauds I4)
--   distinct, exact:      "E", count I4                     | count x (hash d, bucket d)
--   distinct, sketch:     "S", head d                       | L x 128 register bytes
-- ("no time" and "no head" are -inf.) The script reads only the header, the totals and
-- the buckets a window needs, through struct.unpack at offsets; it never decodes the
-- whole value into tables. A value that is not such a string is reset: a hash (the
-- MessagePack format of earlier versions) reports status 1, a malformed string status 2.
--
-- ARGV[1] = "u" (read + update), "o" (enter an outcome), "l" (a label).
-- "u"/"o": ARGV[2] = (ts, lateness_ms, ttl_ms) as "<ddd"; then per key k of KEYS two
--   blobs: the source's spec (I2 n, then per group B kind, B cols, d width, I4 B, I4 D,
--   I4 exact_limit) and the input (d te for "o", then per group B flags (1 run, 2 add,
--   4 pass), d value, d hash). "u" returns per key one string of doubles: te, late,
--   status, then per group n, sum, sumsq, min, max, last, distinct before, distinct
--   after, txns, frauds (none: NaN / -inf).
-- "l": KEYS[1] one key; ARGV[2] = (te, delta) as "<dd"; ARGV[3] its source's spec.
--   Returns the label windows reached.

local MAGIC = 'RSK\1'
local NOH = -math.huge
local NAN = 0 / 0
local MAXN = 4294967295
local Z = { [4] = string.rep('\0', 4), [8] = string.rep('\0', 8), [12] = string.rep('\0', 12),
  [28] = string.rep('\0', 28), [128] = string.rep('\0', 128) }
local unpack_ = struct.unpack
local pack = struct.pack

local function inring(h, b, L) return h ~= NOH and b <= h and h - b < L end

-- ===== a ring of fixed-size buckets over the stored value, with pending writes =====
local function ring(src, base, bs, L)
  return { src = src, base = base, bs = bs, L = L, mods = {}, all = (base == nil) }
end
-- Bucket slot i (1-based) unpacked with fmt.
local function rget(r, i, fmt)
  local m = r.mods[i]
  if m then return unpack_(fmt, m) end
  if r.all then return unpack_(fmt, Z[r.bs]) end
  return unpack_(fmt, r.src, r.base + (i - 1) * r.bs)
end
-- Moves head h forward to bucket b, clearing what it passes (left(i) first); returns
-- the new head and whether every bucket was cleared.
local function advance(r, h, b, left)
  if h == NOH or b - h >= r.L then
    r.all = true; r.mods = {}
    return b, true
  end
  while h < b do
    h = h + 1
    local i = h % r.L + 1
    if left then left(i) end
    r.mods[i] = Z[r.bs]
  end
  return h, false
end
local function rbytes(r)
  local L, bs, keys = r.L, r.bs, {}
  for i in pairs(r.mods) do keys[#keys + 1] = i end
  local function span(out, a, b)
    if b < a then return end
    if r.all then out[#out + 1] = string.rep(Z[bs], b - a + 1)
    else out[#out + 1] = string.sub(r.src, r.base + (a - 1) * bs, r.base + b * bs - 1) end
  end
  local out, nxt = {}, 1
  table.sort(keys)
  for _, i in ipairs(keys) do
    span(out, nxt, i - 1); out[#out + 1] = r.mods[i]; nxt = i + 1
  end
  span(out, nxt, L)
  return table.concat(out)
end

-- ===== HyperLogLog (distinct.rs) =====
local function hll_pos(h)
  local j = math.floor(h / 35184372088832) % 128 + 1 -- 2^45
  local w = h % 35184372088832
  local rank = 46
  if w >= 1 then local _, e = math.frexp(w); rank = 46 - e end
  return j, rank
end
local function hll_estimate(m)
  local sum, zeros = 0, 0
  for j = 1, 128 do
    sum = sum + 2 ^ (-m[j])
    if m[j] == 0 then zeros = zeros + 1 end
  end
  local alpha = 0.7213 / (1.0 + 1.079 / 128.0)
  local e = alpha * 128.0 * 128.0 / sum
  if e <= 2.5 * 128.0 and zeros > 0 then e = 128.0 * math.log(128.0 / zeros) end
  return math.floor(e + 0.5)
end

-- ===== one group =====
-- Each returns its new payload (nil: unchanged) and fills rd.
local function g_stats(s, src, p, c)
  local L, cols = s.B + 1, s.cols
  local head, last, tn, ts = NOH, NOH, 0, 0
  local hdr, bs
  if cols == 1 then hdr, bs = 20, 4 elseif cols == 2 then hdr, bs = 28, 12 else hdr, bs = 16, 28 end
  if p then
    if cols == 1 then head, last, tn = unpack_('<ddI4', src, p)
    elseif cols == 2 then head, last, tn, ts = unpack_('<ddI4d', src, p)
    else head, last = unpack_('<dd', src, p) end
  end
  local r = ring(src, p and p + hdr, bs, L)
  local rd, add, v = c.rd, c.add, c.v
  if cols == 3 then
    head = advance(r, head, c.hb)
    local f, l = math.max(c.lo, head - L + 1), math.min(c.hb, head)
    local rn, rs, rq, mn, mx = 0, 0, 0, NAN, NAN
    -- Oldest first, as group.rs folds; the stored buckets in at most two runs of one
    -- unpack each (a bucket cleared by this advance is empty and skipped).
    if not r.all and f <= l then
      local i0, i1 = f % L + 1, l % L + 1
      local spans = (i0 <= i1) and { { i0, i1 } } or { { i0, L }, { 1, i1 } }
      local runs = {}
      for _, sp in ipairs(spans) do -- at most 256 buckets per unpack (Lua's C stack)
        for a = sp[1], sp[2], 256 do runs[#runs + 1] = { a, math.min(a + 255, sp[2]) } end
      end
      for _, run in ipairs(runs) do
        local a, z = run[1], run[2]
        local x = { unpack_('<' .. string.rep('I4ffdd', z - a + 1), src, r.base + (a - 1) * 28) }
        for k = 0, z - a do
          local n = x[5 * k + 1]
          if n > 0 and not r.mods[a + k] then
            local bmn, bmx = x[5 * k + 2], x[5 * k + 3]
            rn = rn + n; rs = rs + x[5 * k + 4]; rq = rq + x[5 * k + 5]
            if mn ~= mn or bmn < mn then mn = bmn end
            if mx ~= mx or bmx > mx then mx = bmx end
          end
        end
      end
    end
    rd[1], rd[2], rd[3], rd[4], rd[5] = rn, rs, rq, mn, mx
  else
    local fmt = cols == 1 and '<I4' or '<I4d'
    local cleared
    head, cleared = advance(r, head, c.hb, function(i)
      local n, s_ = rget(r, i, fmt)
      tn = math.max(tn - n, 0)
      if cols == 2 then ts = ts - s_ end
    end)
    if cleared then tn, ts = 0, 0 end
    rd[1] = tn
    if cols == 2 then rd[2] = 0 + ts end
  end
  rd[6] = last
  if add then
    if inring(head, c.eb, L) then
      local i = c.eb % L + 1
      if cols == 3 then
        local n, bmn, bmx, bs_, bq = rget(r, i, '<I4ffdd')
        if n == 0 then bmn, bmx = v, v
        else
          if v < bmn then bmn = v end
          if v > bmx then bmx = v end
        end
        r.mods[i] = pack('<I4ffdd', math.min(n + 1, MAXN), bmn, bmx, bs_ + v, bq + v * v)
      elseif cols == 2 then
        local n, s_ = rget(r, i, '<I4d')
        r.mods[i] = pack('<I4d', math.min(n + 1, MAXN), s_ + v)
        tn = math.min(tn + 1, MAXN); ts = ts + v
      else
        local n = rget(r, i, '<I4')
        r.mods[i] = pack('<I4', math.min(n + 1, MAXN))
        tn = math.min(tn + 1, MAXN)
      end
    end
    if c.te > last then last = c.te end
  end
  local h
  if cols == 1 then h = pack('<ddI4', head, last, tn)
  elseif cols == 2 then h = pack('<ddI4d', head, last, tn, ts)
  else h = pack('<dd', head, last) end
  return h .. rbytes(r)
end

local function g_last(s, src, p, c)
  local last = p and unpack_('<d', src, p) or NOH
  c.rd[6] = last
  if c.add then
    if c.te > last then last = c.te end
    return pack('<d', last)
  end
  return p and nil or pack('<d', last)
end

local function g_label(s, src, p, c)
  local L = s.D + s.B + 1
  local head = p and unpack_('<d', src, p) or NOH
  local r = ring(src, p and p + 8, 8, L)
  head = advance(r, head, c.hb)
  local top = c.hb - s.D
  local f, l = math.max(top - s.B, head - L + 1), math.min(top, head)
  local rt, rf = 0, 0
  for b = f, l do
    local t, fr = rget(r, b % L + 1, '<I4I4')
    rt = rt + t; rf = rf + fr
  end
  c.rd[9], c.rd[10] = rt, rf
  if c.add and inring(head, c.eb, L) then
    local i = c.eb % L + 1
    local t, fr = rget(r, i, '<I4I4')
    r.mods[i] = pack('<I4I4', math.min(t + 1, MAXN), fr)
  end
  return pack('<d', head) .. rbytes(r)
end

local function sketch_count(r, head, lo, hb, L)
  local m = { string.byte(Z[128], 1, 128) }
  for b = math.max(lo, head - L + 1), math.min(hb, head) do
    local i = b % L + 1
    local reg = r.mods[i]
    local t
    if reg then t = { string.byte(reg, 1, 128) }
    elseif not r.all then
      local a = r.base + (i - 1) * 128
      t = { string.byte(r.src, a, a + 127) }
    end
    if t then for j = 1, 128 do if t[j] > m[j] then m[j] = t[j] end end end
  end
  return hll_estimate(m)
end
local function sketch_set(r, i, h)
  local j, rank = hll_pos(h)
  local reg = r.mods[i]
  if not reg then
    if r.all then reg = Z[128] else reg = string.sub(r.src, r.base + (i - 1) * 128, r.base + i * 128 - 1) end
  end
  if rank > string.byte(reg, j) then
    r.mods[i] = string.sub(reg, 1, j - 1) .. string.char(rank) .. string.sub(reg, j + 1)
  end
end

local function g_distinct(s, src, p, c)
  local L, lo, hb, eb = s.B + 1, c.lo, c.hb, c.eb
  local rd = c.rd
  local mode = p and string.sub(src, p, p) or 'E'
  if mode == 'S' then
    local head = unpack_('<d', src, p + 1)
    local r = ring(src, p + 9, 128, L)
    head = advance(r, head, hb)
    rd[7] = sketch_count(r, head, lo, hb, L)
    rd[8] = rd[7]
    if c.add and eb >= lo then
      if inring(head, eb, L) then sketch_set(r, eb % L + 1, c.h) end
      rd[8] = sketch_count(r, head, lo, hb, L)
    end
    return 'S' .. pack('<d', head) .. rbytes(r)
  end
  local n = p and unpack_('<I4', src, p + 1) or 0
  local e, q = {}, p and p + 5
  for k = 1, 2 * n, 2 do e[k], e[k + 1], q = unpack_('<dd', src, q) end
  local function count()
    local x = 0
    for k = 2, #e, 2 do if e[k] >= lo and e[k] <= hb then x = x + 1 end end
    return x
  end
  rd[7] = count()
  rd[8] = rd[7]
  if not (c.add and eb >= lo) then return p and nil or ('E' .. pack('<I4', 0)) end
  local h = c.h
  for k = 1, #e, 2 do
    if e[k] == h then
      if eb > e[k + 1] then e[k + 1] = eb end
      rd[8] = count()
      local out = { 'E', pack('<I4', #e / 2) }
      for x = 1, #e, 2 do out[#out + 1] = pack('<dd', e[x], e[x + 1]) end
      return table.concat(out)
    end
  end
  local kept = {}
  for k = 1, #e, 2 do
    if e[k + 1] >= lo then kept[#kept + 1] = e[k]; kept[#kept + 1] = e[k + 1] end
  end
  kept[#kept + 1] = h; kept[#kept + 1] = eb
  e = kept
  if #kept / 2 > s.limit then
    -- Past the exact limit: a sketch of L buckets, its head at hb.
    local r = ring(src, nil, 128, L)
    for k = 1, #kept, 2 do
      if inring(hb, kept[k + 1], L) then sketch_set(r, kept[k + 1] % L + 1, kept[k]) end
    end
    rd[8] = sketch_count(r, hb, lo, hb, L)
    return 'S' .. pack('<d', hb) .. rbytes(r)
  end
  rd[8] = count()
  local out = { 'E', pack('<I4', #kept / 2) }
  for x = 1, #kept, 2 do out[#out + 1] = pack('<dd', kept[x], kept[x + 1]) end
  return table.concat(out)
end

local RUN = { g_stats, g_last, g_distinct, g_label }

-- ===== a key: its spec, its stored value checked against it =====
local function parse_spec(blob)
  local n, q = unpack_('<I2', blob)
  local gs = {}
  for k = 1, n do
    local g = {}
    g.kind, g.cols, g.width, g.B, g.D, g.limit, q = unpack_('<BBdI4I4I4', blob, q)
    gs[k] = g
  end
  return gs
end

-- The payload size a group must have (distinct: checked by its mode).
local function size_ok(g, src, p, len)
  local L = g.B + 1
  if g.kind == 1 then
    if g.cols == 1 then return len == 20 + 4 * L end
    if g.cols == 2 then return len == 28 + 12 * L end
    return len == 16 + 28 * L
  elseif g.kind == 2 then return len == 8
  elseif g.kind == 4 then return len == 8 + 8 * (g.D + L)
  end
  local m = string.sub(src, p, p)
  if m == 'S' then return len == 9 + 128 * L end
  if m ~= 'E' or len < 5 then return false end
  local n = unpack_('<I4', src, p + 1)
  return n <= g.limit and len == 5 + 16 * n
end

-- Reads key's value: (value or false, positions of each group's payload, status).
local function load(key, gs)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then return false, nil, 1 end -- a hash: the earlier format
  if not v then return false, nil, 0 end
  if #v < 12 or string.sub(v, 1, 4) ~= MAGIC then return false, nil, 2 end
  local pos, q = {}, 13
  for k = 1, #gs do
    if q + 3 > #v then return false, nil, 2 end
    local len = unpack_('<I4', v, q)
    if q + 3 + len > #v or not size_ok(gs[k], v, q + 4, len) then return false, nil, 2 end
    pos[k] = { q + 4, len }
    q = q + 4 + len
  end
  if q ~= #v + 1 then return false, nil, 2 end
  return v, pos, 0
end

local function store(key, clock, parts, ttl, keepttl)
  local out = { MAGIC, pack('<d', clock) }
  for k = 1, #parts do
    out[#out + 1] = pack('<I4', #parts[k]); out[#out + 1] = parts[k]
  end
  if keepttl then redis.call('SET', key, table.concat(out), 'KEEPTTL')
  elseif ttl > 0 then redis.call('SET', key, table.concat(out), 'PX', ttl)
  else redis.call('SET', key, table.concat(out)) end
end

local mode = ARGV[1]

if mode == 'l' then
  local te, delta = unpack_('<dd', ARGV[2])
  local gs = parse_spec(ARGV[3])
  local v, pos = load(KEYS[1], gs)
  if not v then return 0 end
  local parts, reached, changed = {}, 0, false
  for k, g in ipairs(gs) do
    local p, len = pos[k][1], pos[k][2]
    parts[k] = string.sub(v, p, p + len - 1)
    if g.kind == 4 then
      local L = g.D + g.B + 1
      local head = unpack_('<d', v, p)
      local eb = math.floor(te / g.width)
      if inring(head, eb, L) then
        local i = eb % L + 1
        local a = p + 8 + (i - 1) * 8
        local t, f = unpack_('<I4I4', v, a)
        f = math.min(math.max(f + delta, 0), t)
        parts[k] = string.sub(v, p, a - 1) .. pack('<I4I4', t, f) .. string.sub(v, a + 8, p + len - 1)
        reached = reached + 1; changed = true
      end
    end
  end
  if changed then store(KEYS[1], unpack_('<d', v, 5), parts, 0, true) end
  return reached
end

local ts, lateness, ttl = unpack_('<ddd', ARGV[2])
local replies = {}
for k = 1, #KEYS do
  local key = KEYS[k]
  local gs = parse_spec(ARGV[2 * k + 1])
  local inp = ARGV[2 * k + 2]
  local v, pos, status = load(key, gs)
  local clock, te, late
  if mode == 'o' then
    if v then clock, te, late = unpack_('<d', v, 5), unpack_('<d', inp), 0 end
  else
    clock = ts
    if v then clock = math.max(unpack_('<d', v, 5), ts) end
    if clock - ts <= lateness then te, late = ts, 0 else te, late = clock, 1 end
  end
  if clock then
    local out = { te, late, status }
    local parts = {}
    local q = 9
    for j, g in ipairs(gs) do
      local flags, val, h
      flags, val, h, q = unpack_('<Bdd', inp, q)
      local p = v and pos[j][1]
      local hb = math.floor(clock / g.width)
      local rd = { 0, 0, 0, NAN, NAN, NOH, 0, 0, 0, 0 }
      if flags % 2 == 1 then
        local c = { rd = rd, hb = hb, eb = math.floor(te / g.width), lo = hb - g.B, te = te,
          add = flags % 8 >= 6, v = val, h = h }
        parts[j] = RUN[g.kind](g, v, p, c)
      end
      if not parts[j] then parts[j] = string.sub(v, p, p + pos[j][2] - 1) end
      for x = 1, 10 do out[#out + 1] = rd[x] end
    end
    store(key, clock, parts, ttl, false)
    if mode == 'u' then replies[k] = pack('<' .. string.rep('d', #out), unpack(out)) end
  elseif mode == 'u' then
    replies[k] = false
  end
end
if mode == 'o' then return 1 end
return replies
