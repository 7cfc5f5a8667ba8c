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
"""
import hashlib
import re
import socket
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
    body = ''.join(open(f).read() for f in files)
    return "#!lua name=%s\n%s\nredis.register_function('%s', main)\n" % (name, body, name)


def counters(con):
    text = con.call('INFO', 'commandstats').decode()
    return {k: (int(c), int(u)) for k, c, u in
            re.findall(r'cmdstat_(\w+):calls=(\d+),usec=(\d+)', text)}


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    capture, layout = sys.argv[1], sys.argv[2]
    files = sys.argv[3:] or [SRC + 'state.lua', SRC + 'state_main.lua']
    calls = []
    for line in open(capture, encoding='latin1'):
        if '"FCALL"' in line and ':%s:' % layout in line:
            a = parse_line(line)
            a[1] = b'risk_state_replay'
            calls.append(a)
    if len(calls) < 2:
        sys.exit('no FCALL of layout %s in %s' % (layout, capture))
    con = Conn(6390)
    con.call('SELECT', 9)
    con.call('FLUSHDB')
    loaded = con.call('FUNCTION', 'LOAD', 'REPLACE', library('risk_state_replay', files).encode())
    if isinstance(loaded, Exception):
        sys.exit(str(loaded))
    half, replies = len(calls) // 2, []
    for k in range(0, half, 200):
        replies += con.pipe(calls[k:min(k + 200, half)])
    before = counters(con)
    for k in range(half, len(calls), 200):
        replies += con.pipe(calls[k:k + 200])
    after = counters(con)
    con.call('FLUSHDB')
    con.call('FUNCTION', 'DELETE', 'risk_state_replay')
    n = after['fcall'][0] - before.get('fcall', (0, 0))[0]
    usec = after['fcall'][1] - before.get('fcall', (0, 0))[1]
    nested = ' '.join('%s %.2f' % (k, (after[k][0] - before.get(k, (0, 0))[0]) / n)
                      for k in ('getrange', 'setrange', 'pexpire', 'exists', 'del') if k in after)
    errors = [r for r in replies if isinstance(r, Exception)]
    digest = hashlib.sha256()
    for r in replies:
        digest.update(repr(r).encode('latin1', 'backslashreplace'))
    print('%d calls replayed, %d timed: %.2f us of server time a call; per call: %s' %
          (len(calls), n, usec / n, nested))
    print('errors %d %s; replies digest %s' % (len(errors), errors[:1], digest.hexdigest()[:16]))
    if errors:
        sys.exit(1)


if __name__ == '__main__':
    main()
