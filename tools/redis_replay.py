#!/usr/bin/env python3
"""The Redis state script's own time, without the bench's client on the same cores.

Replays `FCALL`s captured from a bench run (`redis-cli MONITOR` output) against a
fresh copy of the state library loaded from the working tree (risk-core/src/state/
redis/*.lua, or the files named after the layout), in database 9 emptied first:
the first half of the calls warms the keys, the second half is timed with the
server's own counter (`INFO commandstats`: `FCALL` microseconds / calls), its
calls pipelined 200 at a time so the server stays busy (warm caches: the capacity
of a loaded server, not the idle-server latency the bench prints). Prints the
nested commands per call and a digest of every reply: a change to the script that
keeps the digest keeps the features bit for bit on this traffic.

Capture (BENCHMARKS.md [18], "Redis script"):
    redis-cli -p 6390 FLUSHALL
    redis-cli -p 6390 MONITOR > /tmp/mon.txt &   # stop it after ~45 s
    cargo bench -p risk-benches --bench bench_main -- '^state_redis/read_update_10_features_redis'
    grep '"FCALL"' /tmp/mon.txt | cut -d'"' -f8 | cut -d: -f2 | sort | uniq -c  # layouts
Replay:
    python3 tools/redis_replay.py /tmp/mon.txt <layout> [state.lua state_main.lua]
Compare versions of the script (each "state.lua,state_main.lua"; `git show REV:path >
file` makes an old one), their full replays alternated for R rounds, the server and
this process on the same 2 cores (a noisy VM moves a single run by 20%: compare the
medians of several alternated rounds, never two lone runs):
    python3 tools/redis_replay.py /tmp/mon.txt <layout> --rounds R a1.lua,b1.lua a2.lua,b2.lua
A version written `full:a.lua,b.lua` replays the same calls with every key blob's spec
sent in full (as before specs went by id, `NOSPEC`), the id's first full blob supplying
the bytes: the cost of sending the specs, on the same traffic and script:
    python3 tools/redis_replay.py /tmp/mon.txt <layout> --rounds R a.lua,b.lua full:a.lua,b.lua
Besides the server's `FCALL` time, it prints per call the Redis main thread's CPU time
(/proc/PID/schedstat, the server on this machine) and the bytes the script allocated
(Lua's `collectgarbage('count')` around each call; a call in which the collector freed
memory is left out of that mean and counted): each byte is later work for Lua's
collector.
"""
import hashlib
import re
import socket
import statistics
import subprocess
import sys

SRC = 'risk-core/src/state/redis/'
ESC = {'n': b'\n', 'r': b'\r', 't': b'\t', 'a': b'\a', 'b': b'\b'}


def parse_line(line):
    """The arguments of one MONITOR line from `"FCALL"` on (redis-cli's quoting)."""
    out, i, n = [], line.index('"FCALL"'), len(line)
    while i < n:
        if line[i] != '"':
            i += 1
            continue
        i += 1
        b = bytearray()
        while line[i] != '"':
            c = line[i]
            if c == '\\':
                d = line[i + 1]
                if d == 'x':
                    b.append(int(line[i + 2:i + 4], 16))
                    i += 4
                    continue
                b += ESC.get(d, d.encode('latin1'))
                i += 2
                continue
            b += c.encode('latin1')
            i += 1
        out.append(bytes(b))
        i += 1
    return out


def resp(args):
    return b'*%d\r\n' % len(args) + b''.join(b'$%d\r\n%s\r\n' % (len(a), a) for a in args)


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(('127.0.0.1', port))
        self.f = self.s.makefile('rb')

    def read(self):
        line = self.f.readline()
        t, body = line[:1], line[1:-2]
        if t in (b'+', b':'):
            return body
        if t == b'-':
            return Exception(body.decode())
        if t == b'$':
            n = int(body)
            return None if n < 0 else self.f.read(n + 2)[:-2]
        if t == b'*':
            return [self.read() for _ in range(max(int(body), 0))]
        raise RuntimeError('unexpected reply %r' % line)

    def call(self, *args):
        self.s.sendall(resp([a if isinstance(a, bytes) else str(a).encode() for a in args]))
        return self.read()

    def pipe(self, cmds):
        self.s.sendall(b''.join(resp(c) for c in cmds))
        return [self.read() for _ in cmds]


def library(name, files):
    """The script as a function library `name`, wrapped to count what each call allocates."""
    body = ''.join(open(f).read() for f in files)
    wrap = """
local ALLOC, NA, NGC = 0, 0, 0
local function measured(KEYS, ARGV)
  if ARGV[1] == 'alloc?' then return { tostring(ALLOC), tostring(NA), tostring(NGC) } end
  local c0 = collectgarbage('count')
  local r = main(KEYS, ARGV)
  local c1 = collectgarbage('count')
  if c1 >= c0 then ALLOC, NA = ALLOC + (c1 - c0) * 1024, NA + 1 else NGC = NGC + 1 end
  return r
end
"""
    return "#!lua name=%s\n%s\n%s\nredis.register_function('%s', measured)\n" % (
        name, body, wrap, name)


def counters(con):
    text = con.call('INFO', 'commandstats').decode()
    return {k: (int(c), int(u)) for k, c, u in
            re.findall(r'cmdstat_(\w+):calls=(\d+),usec=(\d+)', text)}


def server_cpu_ns():
    """The CPU time of the Redis server on port 6390 (its main thread), when it runs here."""
    try:
        pid = subprocess.check_output(['pgrep', '-f', 'redis-server.*:6390']).split()[0]
        return lambda: int(open('/proc/%s/schedstat' % pid.decode()).read().split()[0])
    except (subprocess.CalledProcessError, IndexError, OSError):
        return None


def replay(con, calls, files, cpu):
    """One full replay of `files`: (server us a call, CPU us a call or None, bytes a
    call, calls left out of the bytes, nested commands a call, replies)."""
    con.call('FLUSHDB')
    loaded = con.call('FUNCTION', 'LOAD', 'REPLACE', library('risk_state_replay', files).encode())
    if isinstance(loaded, Exception):
        sys.exit(str(loaded))
    half, replies = len(calls) // 2, []
    for k in range(0, half, 200):
        replies += con.pipe(calls[k:min(k + 200, half)])
    alloc0 = con.call('FCALL', 'risk_state_replay', '0', 'alloc?')
    before, c0 = counters(con), cpu() if cpu else 0
    for k in range(half, len(calls), 200):
        replies += con.pipe(calls[k:k + 200])
    after, c1 = counters(con), cpu() if cpu else 0
    alloc1 = con.call('FCALL', 'risk_state_replay', '0', 'alloc?')
    con.call('FLUSHDB')
    con.call('FUNCTION', 'DELETE', 'risk_state_replay')
    n = after['fcall'][0] - before.get('fcall', (0, 0))[0]
    usec = after['fcall'][1] - before.get('fcall', (0, 0))[1]
    nested = ' '.join('%s %.2f' % (k, (after[k][0] - before.get(k, (0, 0))[0]) / n)
                      for k in ('getrange', 'setrange', 'pexpire', 'exists', 'del') if k in after)
    na = int(alloc1[1]) - int(alloc0[1])
    bytes_ = (float(alloc1[0]) - float(alloc0[0])) / max(na, 1)
    gc = int(alloc1[2]) - int(alloc0[2])
    return usec / n, (c1 - c0) / n / 1000 if cpu else None, bytes_, gc, nested, replies


def spec_len(blob):
    """Bytes of a full blob's spec after its id and flag (script.rs `KeySpec::write`)."""
    n = int.from_bytes(blob[13:15], 'little')
    nq = int.from_bytes(blob[19:21], 'little')
    at = 9 + 12 + 38 * n + 12 * nq
    return at + 4 + int.from_bytes(blob[at:at + 4], 'little') - 9


def in_full(calls):
    """`calls` with every key blob sent by id given its spec in full."""
    specs, out = {}, []
    for a in calls:
        a = list(a)
        nkeys = int(a[2])
        for i in range(3 + nkeys + 2, len(a)):
            b = a[i]
            if len(b) < 9:
                continue
            if b[8] == 1:
                specs.setdefault(b[:8], b[9:9 + spec_len(b)])
            elif b[8] == 0 and b[:8] in specs:
                a[i] = b[:8] + b'\x01' + specs[b[:8]] + b[9:]
        out.append(a)
    return out


def digest_of(replies):
    digest = hashlib.sha256()
    for r in replies:
        digest.update(repr(r).encode('latin1', 'backslashreplace'))
    return digest.hexdigest()[:16]


def main():
    args = sys.argv[1:]
    rounds = 1
    if '--rounds' in args:
        i = args.index('--rounds')
        rounds = int(args[i + 1])
        del args[i:i + 2]
    if len(args) < 2:
        sys.exit(__doc__)
    capture, layout = args[0], args[1]
    if rounds > 1 or any(',' in a for a in args[2:]):
        versions = [a.split(',') for a in args[2:]]
    else:
        versions = [args[2:] or [SRC + 'state.lua', SRC + 'state_main.lua']]
    calls = []
    for line in open(capture, encoding='latin1'):
        if '"FCALL"' in line and ':%s:' % layout in line:
            a = parse_line(line)
            a[1] = b'risk_state_replay'
            calls.append(a)
    if len(calls) < 2:
        sys.exit('no FCALL of layout %s in %s' % (layout, capture))
    full = [v[0].startswith('full:') for v in versions]
    versions = [[v[0][5:]] + v[1:] if f else v for v, f in zip(versions, full)]
    calls_full = in_full(calls) if any(full) else None
    con = Conn(6390)
    con.call('SELECT', 9)
    cpu = server_cpu_ns()
    runs = {k: [] for k in range(len(versions))}
    for _ in range(rounds):
        for k, files in enumerate(versions):
            runs[k].append(replay(con, calls_full if full[k] else calls, files, cpu))
    failed = False
    for k, files in enumerate(versions):
        rs = runs[k]
        us = [r[0] for r in rs]
        name = ('full:' if full[k] else '') + ','.join(files)
        print('%s: %d calls replayed, %d timed a round' % (name, len(calls), len(calls) - len(calls) // 2))
        print('  server time a call: %s us (median %.2f)' % (
            ' '.join('%.2f' % u for u in us), statistics.median(us)))
        if rs[0][1] is not None:
            cs = [r[1] for r in rs]
            print('  Redis main thread CPU a call: %s us (median %.2f)' % (
                ' '.join('%.2f' % c for c in cs), statistics.median(cs)))
        print('  allocated a call: %.0f bytes (%d calls in which the collector ran left out)' % (
            rs[-1][2], rs[-1][3]))
        print('  nested commands a call: %s' % rs[-1][4])
        replies = rs[-1][5]
        errors = [r for r in replies if isinstance(r, Exception)]
        print('  errors %d %s; replies digest %s' % (len(errors), errors[:1], digest_of(replies)))
        failed |= bool(errors)
    if failed:
        sys.exit(1)


if __name__ == '__main__':
    main()
