package dev.risk;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * Standard UTF-8 for the C side: NUL-terminated strings packed into one {@code byte[]}.
 * A Java string holding U+0000 is rejected (C would silently cut it there) and so is an
 * unpaired surrogate ({@code String.getBytes} would silently turn it into '?').
 */
final class Utf8 {
    private byte[] buf;
    private int len;

    Utf8(int capacity) {
        buf = new byte[Math.max(16, capacity)];
    }

    int length() {
        return len;
    }

    byte[] toArray() {
        return Arrays.copyOf(buf, len);
    }

    /** Appends {@code s} and a NUL; returns its offset. {@code s} must not be null. */
    int addZ(String s, String what) {
        int start = len;
        int n = s.length();
        ensure(n * 3 + 1);
        for (int i = 0; i < n; i++) {
            char c = s.charAt(i);
            if (c == 0) {
                throw new IllegalArgumentException(what + " contains U+0000 (NUL), which C cannot carry");
            } else if (c < 0x80) {
                buf[len++] = (byte) c;
            } else if (c < 0x800) {
                buf[len++] = (byte) (0xC0 | (c >> 6));
                buf[len++] = (byte) (0x80 | (c & 0x3F));
            } else if (Character.isHighSurrogate(c) && i + 1 < n && Character.isLowSurrogate(s.charAt(i + 1))) {
                int cp = Character.toCodePoint(c, s.charAt(++i));
                ensure(4);
                buf[len++] = (byte) (0xF0 | (cp >> 18));
                buf[len++] = (byte) (0x80 | ((cp >> 12) & 0x3F));
                buf[len++] = (byte) (0x80 | ((cp >> 6) & 0x3F));
                buf[len++] = (byte) (0x80 | (cp & 0x3F));
            } else if (Character.isSurrogate(c)) {
                throw new IllegalArgumentException(what + " contains an unpaired UTF-16 surrogate at index " + i);
            } else {
                buf[len++] = (byte) (0xE0 | (c >> 12));
                buf[len++] = (byte) (0x80 | ((c >> 6) & 0x3F));
                buf[len++] = (byte) (0x80 | (c & 0x3F));
            }
        }
        buf[len++] = 0;
        return start;
    }

    private void ensure(int extra) {
        if (len + extra > buf.length) {
            buf = Arrays.copyOf(buf, Math.max(buf.length * 2, len + extra));
        }
    }

    /** One NUL-terminated string; null stays null (C NULL). */
    static byte[] z(String s, String what) {
        if (s == null) {
            return null;
        }
        Utf8 u = new Utf8(s.length() + 1);
        u.addZ(s, what);
        return u.toArray();
    }

    /** Length-delimited text (JSON, TOML): NUL allowed, unpaired surrogates rejected. */
    static byte[] text(String s, String what) {
        if (s == null) {
            return null;
        }
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (Character.isHighSurrogate(c) && i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1))) {
                i++;
            } else if (Character.isSurrogate(c)) {
                throw new IllegalArgumentException(what + " contains an unpaired UTF-16 surrogate at index " + i);
            }
        }
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static String decode(byte[] b) {
        return b == null ? null : new String(b, StandardCharsets.UTF_8);
    }
}
