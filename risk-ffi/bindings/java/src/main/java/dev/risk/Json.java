package dev.risk;

import java.math.BigInteger;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The JSON this binding reads back from the library (audit records and counters), and
 * string quoting for the JSON it writes. Not a general-purpose library: strict RFC 8259,
 * one document, no extensions.
 *
 * <p>Values: objects are unmodifiable {@code Map<String, Object>} in document order,
 * arrays unmodifiable {@code List<Object>}, strings {@code String}, {@code true}/{@code false}
 * {@code Boolean}, {@code null} {@code null}; an integer literal is a {@code Long}, or a
 * {@code BigInteger} outside the {@code long} range (an unsigned 64-bit id of 2^63 or more:
 * {@code longValue()} gives the binding's unsigned-in-a-long form); any other number is a
 * {@code Double}.
 */
final class Json {
    private final String s;
    private int i;

    private Json(String s) {
        this.s = s;
    }

    /** Parses one JSON document; {@link IllegalArgumentException} naming the offset if it is not one. */
    static Object parse(String text) {
        Json p = new Json(text);
        p.ws();
        Object v = p.value();
        p.ws();
        if (p.i != p.s.length()) {
            throw p.error("text after the document");
        }
        return v;
    }

    /** {@code s} as a JSON string literal, quotes included. */
    static String quote(String s) {
        StringBuilder b = new StringBuilder(s.length() + 2).append('"');
        for (int k = 0; k < s.length(); k++) {
            char c = s.charAt(k);
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                case '\r' -> b.append("\\r");
                case '\t' -> b.append("\\t");
                default -> {
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
                }
            }
        }
        return b.append('"').toString();
    }

    private IllegalArgumentException error(String what) {
        return new IllegalArgumentException("JSON: " + what + " at offset " + i);
    }

    private void ws() {
        while (i < s.length()) {
            char c = s.charAt(i);
            if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
                return;
            }
            i++;
        }
    }

    private char peek() {
        if (i >= s.length()) {
            throw error("unexpected end");
        }
        return s.charAt(i);
    }

    private void expect(String word) {
        if (!s.startsWith(word, i)) {
            throw error("expected " + word);
        }
        i += word.length();
    }

    private Object value() {
        char c = peek();
        switch (c) {
            case '{':
                return object();
            case '[':
                return array();
            case '"':
                return string();
            case 't':
                expect("true");
                return Boolean.TRUE;
            case 'f':
                expect("false");
                return Boolean.FALSE;
            case 'n':
                expect("null");
                return null;
            default:
                if (c == '-' || (c >= '0' && c <= '9')) {
                    return number();
                }
                throw error("unexpected '" + c + "'");
        }
    }

    private Map<String, Object> object() {
        i++; // {
        Map<String, Object> m = new LinkedHashMap<>();
        ws();
        if (peek() == '}') {
            i++;
            return Collections.unmodifiableMap(m);
        }
        while (true) {
            ws();
            if (peek() != '"') {
                throw error("expected a key");
            }
            String k = string();
            ws();
            expect(":");
            ws();
            if (m.containsKey(k)) {
                throw error("repeated key " + quote(k));
            }
            m.put(k, value());
            ws();
            char c = peek();
            i++;
            if (c == '}') {
                return Collections.unmodifiableMap(m);
            }
            if (c != ',') {
                i--;
                throw error("expected ',' or '}'");
            }
        }
    }

    private List<Object> array() {
        i++; // [
        List<Object> a = new ArrayList<>();
        ws();
        if (peek() == ']') {
            i++;
            return Collections.unmodifiableList(a);
        }
        while (true) {
            ws();
            a.add(value());
            ws();
            char c = peek();
            i++;
            if (c == ']') {
                return Collections.unmodifiableList(a);
            }
            if (c != ',') {
                i--;
                throw error("expected ',' or ']'");
            }
        }
    }

    private String string() {
        i++; // opening quote
        StringBuilder b = new StringBuilder();
        while (true) {
            char c = peek();
            i++;
            if (c == '"') {
                return b.toString();
            }
            if (c < 0x20) {
                i--;
                throw error("control character in a string");
            }
            if (c != '\\') {
                b.append(c);
                continue;
            }
            char e = peek();
            i++;
            switch (e) {
                case '"' -> b.append('"');
                case '\\' -> b.append('\\');
                case '/' -> b.append('/');
                case 'b' -> b.append('\b');
                case 'f' -> b.append('\f');
                case 'n' -> b.append('\n');
                case 'r' -> b.append('\r');
                case 't' -> b.append('\t');
                case 'u' -> {
                    if (i + 4 > s.length()) {
                        throw error("short \\u escape");
                    }
                    try {
                        b.append((char) Integer.parseInt(s.substring(i, i + 4), 16));
                    } catch (NumberFormatException x) {
                        throw error("bad \\u escape");
                    }
                    i += 4;
                }
                default -> {
                    i--;
                    throw error("bad escape \\" + e);
                }
            }
        }
    }

    private Object number() {
        int start = i;
        if (peek() == '-') {
            i++;
        }
        boolean integral = true;
        if (peek() == '0') {
            i++;
        } else {
            digits();
        }
        if (i < s.length() && s.charAt(i) == '.') {
            i++;
            digits();
            integral = false;
        }
        if (i < s.length() && (s.charAt(i) == 'e' || s.charAt(i) == 'E')) {
            i++;
            if (peek() == '+' || peek() == '-') {
                i++;
            }
            digits();
            integral = false;
        }
        String t = s.substring(start, i);
        if (!integral) {
            return Double.parseDouble(t);
        }
        BigInteger v = new BigInteger(t);
        if (v.bitLength() < 64) {
            return Long.valueOf(v.longValue());
        }
        return v;
    }

    private void digits() {
        char c = peek();
        if (c < '0' || c > '9') {
            throw error("expected a digit");
        }
        while (i < s.length() && s.charAt(i) >= '0' && s.charAt(i) <= '9') {
            i++;
        }
    }
}
