-- risk entity state on Redis: every key of one decision, read and updated atomically.
-- The arithmetic is that of risk-core/src/state/record.rs and distinct.rs, step for step
-- (bucket rings, running totals in bucket order, the key's clock, lateness, the 52-bit
-- HyperLogLog), so that the Redis store and the in-process store give the same features.
-- This file holds the bindings and the groups' arithmetic; state_main.lua continues the
-- same chunk (a key's spec and header, sequences, `main`).
--
-- Each key is one Redis string (little-endian): a header, then one ring region per group
-- (script.rs computes the layout and sends each group's place in it).
--   header: "RSK" 0x02 | check I4 (the spec's) | K doubles: clock, the clock when the
--     TTL was last set, then per group its block:
--   stats, count column:  head, last, n, head bucket's n                   | occ x W
--   stats, count + sum:   head, last, n, sum, head bucket's n, sum         | occ x W
--   stats, every column:  head, last, head bucket's n, min, max, sum, sumsq | occ x W
--   last:                 last
--   distinct:             mode (0 exact, 1 sketch), pairs, newest pair's bucket, sketch
--                         head                                              | occ x W
--   label:                head                                              | occ x W
--   rings: count L x n I4; count + sum L x (n I4, sum d); every column L x (n I4, min f,
--   max f, sum d, sumsq d); label L x (txns I4, frauds I4); distinct (after the others)
--   max(16 limit, 128 L) bytes: exact (hash d, bucket d) pairs or L x 128 registers.
--   sequences (between the other rings and the distinct ones): a region as record_seq.rs
--   keeps it in process: held I4, start I4, the latest time that left (t xor 2^63, 0:
--   none) I4 I4, then `rows` rows of `rb` bytes: the event time (i64) and its values.
-- ("no time" / "no head" are -inf.) occ: W = ceil(L / 32) words of occupancy bits, as
-- record.rs keeps them: a slot whose bit is clear is empty whatever its bytes hold, so a
-- ring empties by clearing bits and an empty slot is neither read nor folded. A stats
-- group keeps its head bucket in the header (where nearly every event lands), written to
-- its slot when the head moves on. The script reads the header with one GETRANGE, a ring
-- only when one of its occupied slots is needed, and writes the header and the slots
-- that changed with SETRANGE. The TTL (the longest history plus a day) is set again
-- (PEXPIRE) once the key's clock has moved 12 hours past the last time it was set: an
-- idle key expires between its longest history plus 12 hours and plus a day. A value
-- that is not such a string is reset: a hash (the MessagePack format of earlier
-- versions) reports status 1, a malformed string status 2; a key without a value that
-- was built from the key of other definitions (the spec's carry section) status 3.
--
-- ARGV[1] = "u" (read + update), "o" (enter an outcome), "l" (a label), "q" (enter
-- sequence rows); "u<c>" (c a decimal count): the first c keys of KEYS and their blobs
-- are "q" rows this host held for this call, entered before the rest is read and
-- updated as "u" (the replies are the rest's).
-- "u"/"o"/"q": ARGV[2] = (ts, lateness_ms, ttl_ms) as "<ddd"; then per key k of KEYS its
--   blob: d id (a 53-bit hash of the spec's bytes), B full, and with full = 1 the spec
--   (without, the spec held since an earlier call: see spec_of): I4 check, I2 n, I4 K,
--   I2 nq, then per group B kind, B cols, d width, I4 B, I4 D, I4 exact_limit, I4 L,
--   I4 o (its block's first header value), I4 W, I4 roff (its ring's byte offset), then
--   per sequence I4 off, I4 rows, I4 rb (its region's byte offset, rows, bytes a row),
--   I4 bytes of the carry section and the section (I4 their check, I2 plen, I2 olen,
--   I2 nruns, their key names' prefix of olen bytes, nruns x I4 from, I4 to, I4 bytes:
--   see carry_keys.rs); then the event: d te (for "o" and "q"), per group B flags
--   (1 run, 2 add, 4 pass), d value, d hash ("u", "o"); per sequence B add and the
--   row's rb - 8 value bytes ("u": rows known before the call; "q": the others).
--   "u" returns per key one string of doubles: te, late, status, then per group what
--   its kind reads: stats n, last (count column) or n, sum, last (count + sum) or n, sum,
--   sumsq, min, max, last (every column); last: last; distinct: before, after; label:
--   txns, frauds ("none": NaN, -inf); with sequences, then the key's clock and each
--   sequence's region as it was before this call's row entered it (a row that holds
--   state features is entered by a "q" call once the host has computed it).
-- "l": KEYS[1] one key; ARGV[2] = (te, delta) as "<dd"; ARGV[3] its blob (flags 0).
--   Returns the label windows reached.

local MAGIC = 'RSK\2'
local NAN = 0 / 0
local MAXN = 4294967295
local TTL_SLACK = 43200000 -- 12 h: less than the day the TTL holds past the longest history
local GF = '<BBdI4I4I4I4I4I4I4'
local S = 10 -- values per group in a parsed spec
local Z128 = '\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0' ..
  '\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0' ..
  '\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0' ..
  '\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0'
-- The libraries, bound on the first call (a function library's top level sees none).
local NOH, unpack_, pack, rep, floor, max, min, band, bor, bnot, bxor, lshift, frexp
local LOG2 -- a one-bit word's bit index
local function bind()
  NOH = -math.huge
  unpack_, pack, rep = struct.unpack, struct.pack, string.rep
  floor, max, min = math.floor, math.max, math.min
  band, bor, bnot, bxor, lshift = bit.band, bit.bor, bit.bnot, bit.bxor, bit.lshift
  frexp = math.frexp
  LOG2 = {}
  for k = 0, 31 do LOG2[lshift(1, k)] = k end
end
local KEY -- the key being worked on

-- A number's decimal text, kept: Redis formats a number argument of `redis.call` with
-- `%.17g` (~0.35 us each, measured), a string passes as it is; offsets and lengths
-- repeat from call to call, so the table stays small (emptied past 4,096 entries).
local NS, NNS = {}, 0
local function ns(n)
  local s = NS[n]
  if s then return s end
  if NNS >= 4096 then NS, NNS = {}, 0 end
  s = string.format('%d', n)
  NS[n], NNS = s, NNS + 1
  return s
end

-- `len` bytes at offset `off` (0-based), zero padded past the value's end.
local function getr(off, len)
  local s = redis.call('GETRANGE', KEY, ns(off), ns(off + len - 1))
  if #s < len then s = s .. rep('\0', len - #s) end
  return s
end
local function setr(off, s) redis.call('SETRANGE', KEY, ns(off), s) end

-- Occupancy bits: slot i (0-based) of the words at hv[ob].
local function has(hv, ob, i) return band(hv[ob + floor(i / 32)], lshift(1, i % 32)) ~= 0 end
local function occupy(hv, ob, i)
  local w = ob + floor(i / 32); hv[w] = bor(hv[w], lshift(1, i % 32))
end
-- Moves ring (head at hv[o], bits at hv[ob]) to bucket hb: the slots passed are vacated.
local function advance(hv, o, ob, W, L, hb)
  local head = hv[o]
  if head == NOH or hb - head >= L then
    for w = ob, ob + W - 1 do hv[w] = 0 end
  else
    for x = head + 1, hb do
      local i = x % L
      local w = ob + floor(i / 32); hv[w] = band(hv[w], bnot(lshift(1, i % 32)))
    end
  end
  if hb > head then hv[o] = hb end
end

-- ===== reading only the slots needed =====
-- A ring is read from its first to its last slot needed (found by the occupancy bits),
-- not whole: the bytes a call reads become a Lua string, made and collected. (The
-- script's garbage went from 2.8 to 1.0 KB a call with this and the tables kept with
-- the spec; the server time fell ~2%: BENCHMARKS.md [18].)
-- The bits of slots s .. s + n - 1 of one word (0 <= n <= 32).
local function span(s, n)
  if n <= 0 then return 0 end
  if n >= 32 then return -1 end
  return lshift(lshift(1, n) - 1, s)
end
-- The slots of the n buckets from slot s on, of a ring of L <= 32 slots: those from s
-- up, then those wrapped to slot 0, each a word of bits.
local function slots(s, n, L)
  local a = min(n, L - s)
  return span(s, a), span(0, n - a)
end
-- The lowest and the highest set bit of m ~= 0 (bit 31 makes m negative).
local function lowbit(m) return LOG2[band(m, -m)] end
local function highbit(m)
  if m < 0 then return 31 end
  local _, e = frexp(m)
  return e - 1
end
-- The next occupied slot of a one-word ring walked oldest first: the lowest set bit of
-- m1, else of m2 (nil when both are 0), and the two words less that bit.
local function next_slot(m1, m2)
  if m1 ~= 0 then local b = band(m1, -m1); return LOG2[b], bxor(m1, b), m2 end
  if m2 ~= 0 then local b = band(m2, -m2); return LOG2[b], m1, bxor(m2, b) end
  return nil, 0, 0
end
-- A ring's slots lo .. hi (each bs bytes) read at once (no table, no closure: each
-- is garbage too): the bytes, lo and hi.
local function view(roff, bs, lo, hi)
  return getr(roff + lo * bs, (hi - lo + 1) * bs), lo, hi
end
-- Slot i's bytes from the view (rs, lo, hi) when it holds them, with the offset to
-- unpack at, else read alone.
local function slot(rs, lo, hi, roff, i, bs)
  if rs and i >= lo and i <= hi then return rs, (i - lo) * bs + 1 end
  return getr(roff + i * bs, bs), 1
end

local function inring(h, b, L) return h ~= NOH and b <= h and h - b < L end

-- ===== stats groups: each returns what its reply holds =====
local function g_count_sum(hv, cols, L, o, W, roff, hb, eb, te, add, v)
  local bs, fmt = 4, '<I4'
  if cols == 2 then bs, fmt = 12, '<I4d' end
  local head, last, tn = hv[o], hv[o + 1], hv[o + 2]
  local ts, cn, cs, ob = 0, 0, 0, o + 4
  if cols == 1 then cn = hv[o + 3] else ts, cn, cs, ob = hv[o + 3], hv[o + 4], hv[o + 5], o + 6 end
  local rs, rlo, rhi
  if head == NOH or hb - head >= L then
    for w = ob, ob + W - 1 do hv[w] = 0 end
    tn, ts, cn, cs, head = 0, 0, 0, 0, hb
  elseif hb > head then
    if cn > 0 then -- the head bucket to its slot
      local i = head % L
      setr(roff + i * bs, cols == 1 and pack('<I4', cn) or pack('<I4d', cn, cs))
      occupy(hv, ob, i)
    end
    cn, cs = 0, 0
    -- The buckets leaving, in bucket order, each subtracted from the totals.
    if W == 1 then
      -- Their occupied slots by their bits (from the first one's slot up, then the
      -- wrapped ones), read as one span.
      local a, b = slots((head + 1) % L, hb - head, L)
      local word = hv[ob]
      local m1, m2 = band(word, a), band(word, b)
      if m1 ~= 0 or m2 ~= 0 then
        local m = bor(m1, m2)
        rs, rlo, rhi = view(roff, bs, lowbit(m), highbit(m))
        hv[ob] = band(word, bnot(m))
      end
      local i
      i, m1, m2 = next_slot(m1, m2)
      while i do
        local n, s_ = unpack_(fmt, rs, (i - rlo) * bs + 1)
        tn = max(tn - n, 0)
        if cols == 2 then ts = ts - s_ end
        i, m1, m2 = next_slot(m1, m2)
      end
    else
      for x = head + 1, hb do
        local i = x % L
        local w, m = ob + floor(i / 32), lshift(1, i % 32)
        if band(hv[w], m) ~= 0 then
          if not rs then rs, rlo, rhi = view(roff, bs, 0, L - 1) end
          local n, s_ = unpack_(fmt, rs, i * bs + 1)
          tn = max(tn - n, 0)
          if cols == 2 then ts = ts - s_ end
          hv[w] = band(hv[w], bnot(m))
        end
      end
    end
    head = hb
  end
  local rn, rsum, rlast = tn, 0 + ts, last
  if add then
    if eb == head then
      cn = min(cn + 1, MAXN); tn = min(tn + 1, MAXN)
      if cols == 2 then cs = cs + v; ts = ts + v end
    elseif inring(head, eb, L) then
      local i = eb % L
      local n, s_ = 0, 0
      if has(hv, ob, i) then n, s_ = unpack_(fmt, slot(rs, rlo, rhi, roff, i, bs)) end
      n = min(n + 1, MAXN); tn = min(tn + 1, MAXN)
      if cols == 2 then
        s_ = s_ + v; ts = ts + v
        setr(roff + i * bs, pack('<I4d', n, s_))
      else
        setr(roff + i * bs, pack('<I4', n))
      end
      occupy(hv, ob, i)
    end
    if te > last then last = te end
  end
  hv[o], hv[o + 1], hv[o + 2] = head, last, tn
  if cols == 1 then hv[o + 3] = cn else hv[o + 3], hv[o + 4], hv[o + 5] = ts, cn, cs end
  return rn, rsum, rlast
end

-- A full slot at byte `at` of rs folded into the window's n, sum, sum of squares, min
-- and max.
local function fold_full(rs, at, rn, rsum, rq, mn, mx)
  local n, bmn, bmx, bs_, bq = unpack_('<I4ffdd', rs, at)
  if mn ~= mn or bmn < mn then mn = bmn end
  if mx ~= mx or bmx > mx then mx = bmx end
  return rn + n, rsum + bs_, rq + bq, mn, mx
end

local function g_full(hv, L, o, W, roff, hb, eb, lo, te, add, v)
  local head, last, cn, cmn, cmx, csum, csq = unpack(hv, o, o + 6)
  local ob = o + 7
  if head == NOH or hb - head >= L then
    for w = ob, ob + W - 1 do hv[w] = 0 end
    cn, cmn, cmx, csum, csq, head = 0, 0, 0, 0, 0, hb
  elseif hb > head then
    if cn > 0 then
      local i = head % L
      setr(roff + i * 28, pack('<I4ffdd', cn, cmn, cmx, csum, csq))
      occupy(hv, ob, i)
    end
    cn, cmn, cmx, csum, csq = 0, 0, 0, 0, 0
    hv[o] = head
    advance(hv, o, ob, W, L, hb)
    head = hb
  end
  -- Oldest first, as record.rs folds: the stored slots, then the head bucket.
  local rn, rsum, rq, mn, mx = 0, 0, 0, NAN, NAN
  local rs, rlo, rhi
  local first = max(lo, head - L + 1)
  if W == 1 then
    -- The window's occupied slots by their bits (from the first one's slot up, then the
    -- wrapped ones), read as one span.
    local word = hv[ob]
    if word ~= 0 and head > first then
      local a, b = slots(first % L, head - first, L)
      local m1, m2 = band(word, a), band(word, b)
      if m1 ~= 0 or m2 ~= 0 then
        local m = bor(m1, m2)
        rs, rlo, rhi = view(roff, 28, lowbit(m), highbit(m))
      end
      local i
      i, m1, m2 = next_slot(m1, m2)
      while i do
        rn, rsum, rq, mn, mx = fold_full(rs, (i - rlo) * 28 + 1, rn, rsum, rq, mn, mx)
        i, m1, m2 = next_slot(m1, m2)
      end
    end
  else
    -- Longer rings: every slot of the window, its bit tested (has(), inline), the ring
    -- read whole at the first occupied one.
    for w = ob, ob + W - 1 do
      if hv[w] ~= 0 then
        for x = first, head - 1 do
          local i = x % L
          if band(hv[ob + floor(i / 32)], lshift(1, i)) ~= 0 then
            if not rs then rs, rlo, rhi = view(roff, 28, 0, L - 1) end
            rn, rsum, rq, mn, mx = fold_full(rs, i * 28 + 1, rn, rsum, rq, mn, mx)
          end
        end
        break
      end
    end
  end
  if cn > 0 then
    rn = rn + cn; rsum = rsum + csum; rq = rq + csq
    if mn ~= mn or cmn < mn then mn = cmn end
    if mx ~= mx or cmx > mx then mx = cmx end
  end
  local rlast = last
  if add then
    if eb == head then
      if cn == 0 then cmn, cmx = v, v
      else
        if v < cmn then cmn = v end
        if v > cmx then cmx = v end
      end
      cmn, cmx = unpack_('<ff', pack('<ff', cmn, cmx))
      cn = min(cn + 1, MAXN); csum = csum + v; csq = csq + v * v
    elseif inring(head, eb, L) then
      local i = eb % L
      local n, bmn, bmx, bs_, bq = 0, 0, 0, 0, 0
      if has(hv, ob, i) then
        n, bmn, bmx, bs_, bq = unpack_('<I4ffdd', slot(rs, rlo, rhi, roff, i, 28))
      end
      if n == 0 then bmn, bmx = v, v
      else
        if v < bmn then bmn = v end
        if v > bmx then bmx = v end
      end
      setr(roff + i * 28, pack('<I4ffdd', min(n + 1, MAXN), bmn, bmx, bs_ + v, bq + v * v))
      occupy(hv, ob, i)
    end
    if te > last then last = te end
  end
  hv[o], hv[o + 1], hv[o + 2], hv[o + 3], hv[o + 4], hv[o + 5], hv[o + 6] =
    head, last, cn, cmn, cmx, csum, csq
  return rn, rsum, rq, mn, mx, rlast
end

local function g_label(hv, B, D, L, o, W, roff, hb, eb, add)
  local ob = o + 1
  advance(hv, o, ob, W, L, hb)
  local head = hv[o]
  local top = hb - D
  local rt, rf, rs = 0, 0, nil
  for x = max(top - B, head - L + 1), min(top, head) do
    local i = x % L
    if has(hv, ob, i) then
      if not rs then rs = getr(roff, 8 * L) end
      local t, fr = unpack_('<I4I4', rs, 8 * i + 1)
      rt = rt + t; rf = rf + fr
    end
  end
  if add and inring(head, eb, L) then
    local i = eb % L
    local t, fr = 0, 0
    if has(hv, ob, i) then t, fr = unpack_('<I4I4', rs or getr(roff, 8 * L), 8 * i + 1) end
    setr(roff + 8 * i, pack('<I4I4', min(t + 1, MAXN), fr))
    occupy(hv, ob, i)
  end
  return rt, rf
end

-- ===== distinct (distinct.rs) =====
local function hll_pos(h)
  local j = floor(h / 35184372088832) % 128 + 1 -- 2^45
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
  return floor(e + 0.5)
end

-- The format of c pairs, kept.
local PF = {}
local function pairs_fmt(c)
  local f = PF[c]
  if not f then f = '<' .. rep('d', 2 * c); PF[c] = f end
  return f
end
-- Pairs e[1..2n] from the region at roff (chunks of 256 pairs: Lua's C stack). Up to
-- 256, the table of the one unpack is e (less its last value, the next position).
local function read_pairs(roff, n)
  local s = getr(roff, 16 * n)
  if n <= 256 then
    local e = { unpack_(pairs_fmt(n), s) }
    e[2 * n + 1] = nil
    return e
  end
  local e = {}
  for a = 0, n - 1, 256 do
    local c = min(256, n - a)
    local t = { unpack_(pairs_fmt(c), s, 16 * a + 1) }
    for x = 1, 2 * c do e[2 * a + x] = t[x] end
  end
  return e
end
local function write_pairs(roff, e, from, to) -- pairs from..to (1-based)
  for a = from, to, 256 do
    local z = min(a + 255, to)
    setr(roff + 16 * (a - 1), pack(pairs_fmt(z - a + 1), unpack(e, 2 * a - 1, 2 * z)))
  end
end
local function inside(e, lo, hb)
  local x = 0
  for k = 2, #e, 2 do if e[k] >= lo and e[k] <= hb then x = x + 1 end end
  return x
end

local function sketch(hv, o, ob, W, L, roff, hb, eb, lo, enter, h)
  advance(hv, o + 3, ob, W, L, hb)
  local head = hv[o + 3]
  local rs = getr(roff, 128 * L)
  local m = { string.byte(Z128, 1, 128) }
  for x = max(lo, head - L + 1), min(hb, head) do
    local i = x % L
    if has(hv, ob, i) then
      local t = { string.byte(rs, 128 * i + 1, 128 * i + 128) }
      for j = 1, 128 do if t[j] > m[j] then m[j] = t[j] end end
    end
  end
  local before = hll_estimate(m)
  if not enter then return before, before end
  if inring(head, eb, L) then
    local i = eb % L
    local j, rank = hll_pos(h)
    local reg = has(hv, ob, i) and string.sub(rs, 128 * i + 1, 128 * i + 128) or Z128
    if rank > string.byte(reg, j) then
      setr(roff + 128 * i, string.sub(reg, 1, j - 1) .. string.char(rank) .. string.sub(reg, j + 1))
      if rank > m[j] then m[j] = rank end
    end
    occupy(hv, ob, i)
  end
  return before, hll_estimate(m)
end

-- Returns the distinct count before and after, and whether the block was malformed
-- (then reset).
local function g_distinct(hv, limit, L, o, W, roff, hb, eb, lo, add, h)
  local ob, enter = o + 4, add and eb >= lo
  local mode, n, maxb = hv[o], hv[o + 1], hv[o + 2]
  local bad = not ((mode == 0 or mode == 1) and n >= 0 and n <= limit and n == floor(n))
  if bad then
    mode, n, maxb = 0, 0, 0
    hv[o], hv[o + 1], hv[o + 2], hv[o + 3] = 0, 0, 0, NOH
  end
  if mode == 1 then
    local b4, af = sketch(hv, o, ob, W, L, roff, hb, eb, lo, enter, h)
    return b4, af, bad
  end
  if n > 0 and maxb < lo then n = 0 end -- every pair has left the window: none counts again
  local e, before = {}, 0
  if n > 0 then
    e = read_pairs(roff, n)
    before = inside(e, lo, hb)
  end
  hv[o + 1] = n
  if not enter then return before, before, bad end
  for k = 1, 2 * n, 2 do
    if e[k] == h then
      if eb > e[k + 1] then
        e[k + 1] = eb
        write_pairs(roff, e, (k + 1) / 2, (k + 1) / 2)
        if eb > maxb then hv[o + 2] = eb end
      end
      return before, inside(e, lo, hb), bad
    end
  end
  local kept, dropped = {}, false
  for k = 1, 2 * n, 2 do
    if e[k + 1] >= lo then
      kept[#kept + 1] = e[k]; kept[#kept + 1] = e[k + 1]
    else
      dropped = true
    end
  end
  kept[#kept + 1] = h; kept[#kept + 1] = eb
  local m = #kept / 2
  if m > limit then
    -- Past the exact limit: a sketch of L buckets, its head at hb.
    local regs, mm = {}, { string.byte(Z128, 1, 128) }
    for k = 1, #kept, 2 do
      if inring(hb, kept[k + 1], L) then
        local i = kept[k + 1] % L
        local t = regs[i]
        if not t then t = { string.byte(Z128, 1, 128) }; regs[i] = t end
        local j, rank = hll_pos(kept[k])
        if rank > t[j] then t[j] = rank end
        if rank > mm[j] then mm[j] = rank end
      end
    end
    for w = ob, ob + W - 1 do hv[w] = 0 end
    for i, t in pairs(regs) do
      setr(roff + 128 * i, string.char(unpack(t)))
      occupy(hv, ob, i)
    end
    hv[o], hv[o + 1], hv[o + 2], hv[o + 3] = 1, 0, 0, hb
    return before, hll_estimate(mm), bad
  end
  local mb = eb
  for k = 2, #kept, 2 do if kept[k] > mb then mb = kept[k] end end
  if dropped then write_pairs(roff, kept, 1, m)
  else setr(roff + 16 * (m - 1), pack('<dd', h, eb)) end
  hv[o + 1], hv[o + 2] = m, mb
  return before, inside(kept, lo, hb), bad
end

