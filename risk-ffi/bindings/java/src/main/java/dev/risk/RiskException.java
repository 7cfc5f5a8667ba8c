package dev.risk;

import java.nio.charset.StandardCharsets;

/**
 * A non-OK {@code risk_result} from the C library, with the library's message for it
 * ({@code risk_last_error()}, read in the same native call that failed).
 */
public class RiskException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /** {@code RISK_OK}. Never carried by an exception; listed for completeness. */
    public static final int OK = 0;
    /** {@code RISK_ERR_NULL}: a required pointer (here: a Java {@code null}) was NULL. */
    public static final int ERR_NULL = 1;
    /** {@code RISK_ERR_UTF8}: a string was not valid UTF-8. */
    public static final int ERR_UTF8 = 2;
    /** {@code RISK_ERR_INVALID}: an argument was out of range. */
    public static final int ERR_INVALID = 3;
    /** {@code RISK_ERR_CONFIG}: the configuration could not build an engine. */
    public static final int ERR_CONFIG = 4;
    /** {@code RISK_ERR_TRANSACTION}: the transaction was rejected (message names the field). */
    public static final int ERR_TRANSACTION = 5;
    /** {@code RISK_ERR_SHUT_DOWN}: the engine was shut down. */
    public static final int ERR_SHUT_DOWN = 6;
    /** {@code RISK_ERR_PANIC}: a Rust panic was caught (a library bug). */
    public static final int ERR_PANIC = 7;
    /** {@code RISK_ERR_BUFFER_TOO_SMALL}: handled inside the glue; should never surface. */
    public static final int ERR_BUFFER_TOO_SMALL = 8;
    /** {@code RISK_ERR_JSON}: malformed JSON input. */
    public static final int ERR_JSON = 9;
    /** {@code RISK_ERR_HANDLE}: a freed, never-created or foreign handle. */
    public static final int ERR_HANDLE = 10;
    /**
     * {@code RISK_ERR_EMPTY}: nothing to return yet: a poll that timed out (mapped to
     * {@code Optional.empty()} by {@link Subscription#poll}: poll again), or
     * {@link RiskEngine#drillReportJson} before any drill.
     */
    public static final int ERR_EMPTY = 11;
    /** {@code RISK_ERR_RELOAD}: rule reload failed or there is no rule file. */
    public static final int ERR_RELOAD = 12;
    /**
     * {@code RISK_ERR_CLOSED}: no more items will ever come: thrown by
     * {@link Subscription#poll} when the engine has no deep tier or was freed. Stop polling.
     */
    public static final int ERR_CLOSED = 13;
    /**
     * {@code RISK_ERR_AUDIT}: the audit log failed: {@link RiskEngine#auditFlush} timed out,
     * the log is closed (the engine was shut down), or a write failed; the detail says which.
     */
    public static final int ERR_AUDIT = 14;
    /**
     * {@code RISK_ERR_DEPLOY}: a {@link RiskEngine#deploy}, {@link RiskEngine#promote} or
     * {@link RiskEngine#rollback} was refused; the detail says why (the validation gate and
     * which check, a candidate that does not load or warm up, a schema mismatch, a deploy of
     * the target in progress, nothing to promote or roll back to). What serves is unchanged.
     */
    public static final int ERR_DEPLOY = 15;
    /**
     * {@code RISK_ERR_STATE}: entity state ({@link EntityState}) refused the call; the detail
     * says why (a label for an unknown or evicted transaction, dated before it, or with no
     * label feature; an unknown list or a value that cannot be one of its keys; a bad list
     * file, named {@code file:line}; a snapshot that could not be written; an engine without
     * a {@code [state]} section).
     */
    public static final int ERR_STATE = 16;

    private static final String[] NAMES = {
        "RISK_OK", "RISK_ERR_NULL", "RISK_ERR_UTF8", "RISK_ERR_INVALID", "RISK_ERR_CONFIG",
        "RISK_ERR_TRANSACTION", "RISK_ERR_SHUT_DOWN", "RISK_ERR_PANIC",
        "RISK_ERR_BUFFER_TOO_SMALL", "RISK_ERR_JSON", "RISK_ERR_HANDLE", "RISK_ERR_EMPTY",
        "RISK_ERR_RELOAD", "RISK_ERR_CLOSED", "RISK_ERR_AUDIT", "RISK_ERR_DEPLOY", "RISK_ERR_STATE",
    };

    private final int code;
    private final String detail;

    /** An error with the given code and library message. */
    public RiskException(int code, String detail) {
        super(codeName(code) + ": " + (detail == null || detail.isEmpty() ? "(no message)" : detail));
        this.code = code;
        this.detail = detail == null ? "" : detail;
    }

    /** Called by the JNI glue: the message arrives as the library's UTF-8 bytes. */
    RiskException(int code, byte[] utf8Detail) {
        this(code, utf8Detail == null ? "" : new String(utf8Detail, StandardCharsets.UTF_8));
    }

    /** The numeric {@code risk_result} (stable: codes are only ever appended). */
    public int code() {
        return code;
    }

    /** The C name of {@link #code()}, e.g. {@code RISK_ERR_TRANSACTION}. */
    public String codeName() {
        return codeName(code);
    }

    /** The library's message alone (without the code name prefix); may be empty. */
    public String detail() {
        return detail;
    }

    /** The C name of a result code; {@code RISK_ERR_UNKNOWN(n)} for a code newer than this binding. */
    public static String codeName(int code) {
        return code >= 0 && code < NAMES.length ? NAMES[code] : "RISK_ERR_UNKNOWN(" + Integer.toUnsignedString(code) + ")";
    }
}
