-- risk entity state on Redis: one key's groups, read and updated atomically.
-- The layout and arithmetic are those of risk-core/src/state/group.rs and mem.rs, step
-- for step (bucket rings, the key's clock, lateness, the 52-bit HyperLogLog), so that the
-- Redis store and the in-process store give the same features on the same stream.
--
-- KEYS[1]: the key's hash ("c": clock; "g<id>": one group's state, MessagePack).
-- ARGV[1] = "u" (read + update), "o" (enter an outcome), "l" (a label).
-- "u"/"o": ts (u: bounded event time; o: the event's effective time), lateness_ms,
--   ttl_ms, n, then per group 11 values: id, kind (1 stats, 2 last, 3 distinct,
--   4 label), width_ms, B, D, exact_limit, cols (1 count, 2 sum, 3 full), add, pass,
--   value, hash.
--   "u" returns {te, late, then per group n, sum, sumsq, min, max, last,
--   distinct_before, distinct_after, txns, frauds} (integers as integers, sums and
--   extremes as exact text, none as nil).
-- "l": te, delta, n, then per label group: id, width_ms, B, D. Returns the windows reached.

local key = KEYS[1]
local mode = ARGV[1]

local function slot(b, L) return (b % L) + 1 end
-- Integers travel as integer replies, other numbers as exact text, none as nil.
local function txt(x) if x == nil then return false end return string.format('%.17g', x) end
local function int(x) if x == nil then return false end return x end

local function advance(g, b, L, clear)
  if g.h == nil or b - g.h >= L then
    for i = 1, L do clear(g, i) end
    g.h = b
    return
  end
  while g.h < b do
    g.h = g.h + 1
    clear(g, slot(g.h, L))
  end
end

local function inring(g, b, L)
  return g.h ~= nil and b <= g.h and g.h - b < L
end

local function bounds(g, lo, hi, L)
  if g.h == nil then return 1, 0 end
  return math.max(lo, g.h - L + 1), math.min(hi, g.h)
end

local function clear_stats(g, i)
  g.n[i] = 0; g.s[i] = 0; g.q[i] = 0; g.mn[i] = 0; g.mx[i] = 0
end
-- Count and sum rings keep their window total (tn, ts) as buckets enter and leave, in
-- the order TotRing does (group.rs).
local function advance_tot(g, b, L)
  if g.h == nil or b - g.h >= L then
    for i = 1, L do clear_stats(g, i) end
    g.h = b; g.tn = 0; g.ts = 0
    return
  end
  while g.h < b do
    g.h = g.h + 1
    local i = slot(g.h, L)
    g.tn = g.tn - g.n[i]
    g.ts = g.ts - g.s[i]
    clear_stats(g, i)
  end
end

local function clear_label(g, i) g.t[i] = 0; g.f[i] = 0 end
local function clear_regs(g, i)
  local r = {}
  for j = 1, 128 do r[j] = 0 end
  g.r[i] = r
end

local function hll_set(r, h)
  local j = math.floor(h / 35184372088832) % 128 + 1 -- 2^45
  local w = h % 35184372088832
  local rank = 46
  while w >= 1 do w = math.floor(w / 2); rank = rank - 1 end
  if rank > r[j] then r[j] = rank end
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

local function distinct_count(g, lo, hi, L)
  if g.m == 'e' then
    local c = 0
    for i = 1, #g.e, 2 do
      local b = g.e[i + 1]
      if b >= lo and b <= hi then c = c + 1 end
    end
    return c
  end
  local m = {}
  for j = 1, 128 do m[j] = 0 end
  local f, l = bounds(g, lo, hi, L)
  for b = f, l do
    local r = g.r[slot(b, L)]
    for j = 1, 128 do if r[j] > m[j] then m[j] = r[j] end end
  end
  return hll_estimate(m)
end

local function distinct_add(g, h, b, lo, hb, L, limit)
  if g.m == 'e' then
    for i = 1, #g.e, 2 do
      if g.e[i] == h then
        if b > g.e[i + 1] then g.e[i + 1] = b end
        return
      end
    end
    local kept = {}
    for i = 1, #g.e, 2 do
      if g.e[i + 1] >= lo then kept[#kept + 1] = g.e[i]; kept[#kept + 1] = g.e[i + 1] end
    end
    kept[#kept + 1] = h; kept[#kept + 1] = b
    g.e = kept
    if #kept / 2 > limit then
      local s = { m = 's', r = {} }
      advance(s, hb, L, clear_regs)
      for i = 1, #kept, 2 do
        if inring(s, kept[i + 1], L) then hll_set(s.r[slot(kept[i + 1], L)], kept[i]) end
      end
      g.m = 's'; g.e = nil; g.r = s.r; g.h = s.h
    end
    return
  end
  if inring(g, b, L) then hll_set(g.r[slot(b, L)], h) end
end

local function load(field, kind)
  local raw = redis.call('HGET', key, field)
  if raw then return cmsgpack.unpack(raw) end
  if kind == 1 then return { n = {}, s = {}, q = {}, mn = {}, mx = {} } end
  if kind == 3 then return { m = 'e', e = {} } end
  if kind == 4 then return { t = {}, f = {} } end
  return {}
end

if mode == 'l' then
  if redis.call('EXISTS', key) == 0 then return 0 end
  local te, delta, n = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
  local reached = 0
  for k = 0, n - 1 do
    local a = 5 + k * 4
    local id, width, B, D = ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
    local field = 'g' .. id
    local raw = redis.call('HGET', key, field)
    if raw then
      local g = cmsgpack.unpack(raw)
      local L = D + B + 1
      local eb = math.floor(te / width)
      if inring(g, eb, L) then
        local i = slot(eb, L)
        local f = g.f[i] + delta
        if f < 0 then f = 0 end
        if f > g.t[i] then f = g.t[i] end
        g.f[i] = f
        redis.call('HSET', key, field, cmsgpack.pack(g))
        reached = reached + 1
      end
    end
  end
  return reached
end

local ts, lateness, ttl, n = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local stored = tonumber(redis.call('HGET', key, 'c'))
local clock, te, late
if mode == 'o' then
  if stored == nil then return 0 end
  clock, te, late = stored, ts, 0
else
  clock = ts
  if stored ~= nil and stored > ts then clock = stored end
  if clock - ts <= lateness then te, late = ts, 0 else te, late = clock, 1 end
end
local out = { te, late }
local writes = { 'c', clock }
for k = 0, n - 1 do
  local a = 6 + k * 11
  local id, kind = ARGV[a], tonumber(ARGV[a + 1])
  local width, B, D = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local limit, cols = tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6])
  local add, pass = ARGV[a + 7] == '1', ARGV[a + 8] == '1'
  local v, h = tonumber(ARGV[a + 9]), tonumber(ARGV[a + 10])
  local field = 'g' .. id
  local g = load(field, kind)
  local hb, eb = math.floor(clock / width), math.floor(te / width)
  local lo = hb - B
  local rn, rs, rq, rmn, rmx, rlast, db, da, rt, rf = 0, 0, 0, nil, nil, nil, 0, 0, 0, 0
  local touched = false
  if kind == 1 then
    local L = B + 1
    if cols == 3 then
      advance(g, hb, L, clear_stats)
      local f, l = bounds(g, lo, hb, L)
      for b = f, l do
        local i = slot(b, L)
        if g.n[i] > 0 then
          rn = rn + g.n[i]; rs = rs + g.s[i]; rq = rq + g.q[i]
          if rmn == nil or g.mn[i] < rmn then rmn = g.mn[i] end
          if rmx == nil or g.mx[i] > rmx then rmx = g.mx[i] end
        end
      end
    else
      advance_tot(g, hb, L)
      rn = 0 + g.tn
      rs = 0 + g.ts
    end
    rlast = g.l
    if add and pass then
      if inring(g, eb, L) then
        local i = slot(eb, L)
        if cols == 3 then
          if g.n[i] == 0 then g.mn[i] = v; g.mx[i] = v
          else
            if v < g.mn[i] then g.mn[i] = v end
            if v > g.mx[i] then g.mx[i] = v end
          end
          g.q[i] = g.q[i] + v * v
        end
        g.n[i] = g.n[i] + 1
        if cols >= 2 then g.s[i] = g.s[i] + v end
        if cols < 3 then
          g.tn = g.tn + 1
          if cols == 2 then g.ts = g.ts + v end
        end
      end
      if g.l == nil or te > g.l then g.l = te end
    end
    touched = true
  elseif kind == 2 then
    rlast = g.l
    if add and pass then
      if g.l == nil or te > g.l then g.l = te end
    end
    touched = true
  elseif kind == 3 then
    local L = B + 1
    if g.m == 's' then advance(g, hb, L, clear_regs) end
    db = distinct_count(g, lo, hb, L)
    da = db
    if add and pass and eb >= lo then
      distinct_add(g, h, eb, lo, hb, L, limit)
      da = distinct_count(g, lo, hb, L)
    end
    touched = true
  else
    local L = D + B + 1
    advance(g, hb, L, clear_label)
    local top = hb - D
    local f, l = bounds(g, top - B, top, L)
    for b = f, l do
      local i = slot(b, L)
      rt = rt + g.t[i]; rf = rf + g.f[i]
    end
    if add and pass and inring(g, eb, L) then
      local i = slot(eb, L)
      g.t[i] = g.t[i] + 1
    end
    touched = true
  end
  if touched then
    writes[#writes + 1] = field
    writes[#writes + 1] = cmsgpack.pack(g)
  end
  if mode == 'u' then
    out[#out + 1] = int(rn)
    if cols >= 2 and kind == 1 then
      out[#out + 1] = txt(rs); out[#out + 1] = txt(rq); out[#out + 1] = txt(rmn); out[#out + 1] = txt(rmx)
    else
      out[#out + 1] = 0; out[#out + 1] = 0; out[#out + 1] = false; out[#out + 1] = false
    end
    out[#out + 1] = int(rlast)
    out[#out + 1] = int(db); out[#out + 1] = int(da); out[#out + 1] = int(rt); out[#out + 1] = int(rf)
  end
end
redis.call('HSET', key, unpack(writes))
if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
if mode == 'o' then return 1 end
return out
