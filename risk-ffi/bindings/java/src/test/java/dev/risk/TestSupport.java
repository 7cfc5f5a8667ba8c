package dev.risk;

import static org.junit.jupiter.api.Assertions.assertAll;
import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;
import org.junit.jupiter.api.function.ThrowingSupplier;

/**
 * What the engine tests share: the configurations they build engines from, an engine on
 * examples/risk.toml opened once per test class ({@link #engine}), hang detectors and checks.
 */
abstract class TestSupport {
    /** A constant rule tier (0.1) and no fast tier: the rule tier decides every transaction. */
    static final String CONSTANT_TOML = Configs.load("rules_only.toml");

    /**
     * Every decision lands in the gray band and goes to a (constant) deep tier. Nothing in it
     * depends on how fast the machine is: the fast deadline is the largest allowed (60 s) and
     * the deep budget an hour, so no decision or verdict falls back to a timeout.
     */
    static final String DEEP_TOML = deepToml("budget_ms = 3600000\n");

    /**
     * A deep dispatcher that never takes a batch during a test: it waits for {@code maxBatch}
     * items or max_wait (an hour) after the oldest's enqueue. Fewer than {@code maxBatch}
     * queued items stay queued until shutdown, deterministically.
     */
    static String stuckDeepToml(int maxBatch) {
        return deepToml("budget_ms = 7200000\nmax_wait_ms = 3600000\nmax_batch = " + maxBatch + "\n");
    }

    /** gray_deep.toml (rules 0.1, fast 0.5 in the band [0.3, 0.7], deep 0.9) with the given [deep] table. */
    static String deepToml(String deepTable) {
        return Configs.load("gray_deep.toml", Map.of("DEEP", deepTable));
    }

    /**
     * How long a call that must return at once, or once the test releases it, may take before
     * the test fails it as hung. A hang detector, not a performance limit.
     */
    static final Duration HANG = Duration.ofSeconds(60);
    static final Duration HOUR = Duration.ofHours(1);
    static final int HOUR_MS = 3_600_000;

    /** {@code f} on another thread; fails the test as hung when it has not returned in {@link #HANG}. */
    static <T> T noHang(String what, ThrowingSupplier<T> f) {
        return assertTimeoutPreemptively(HANG, f, () -> what + ": hung (still running after " + HANG + ")");
    }

    /** An hour-long poll that must end with RISK_ERR_CLOSED (at once, or once the deep tier stops). */
    static void expectClosed(String what, Subscription s) {
        RiskException e = riskError(RiskException.ERR_CLOSED, () -> noHang(what, () -> s.poll(HOUR)));
        assertEquals("RISK_ERR_CLOSED", e.codeName());
    }

    /** An hour-long poll that must return a verdict. */
    static Verdict nextVerdict(String what, Subscription s) {
        return noHang(what, () -> s.poll(HOUR)).orElseThrow(() -> new AssertionError(what + ": empty after an hour?"));
    }

    /** A number of the metrics JSON: {@code key} at the top level, or in the object {@code section}. */
    static long metric(String json, String section, String key) {
        String in = section == null ? json : section(json, section);
        Matcher m = Pattern.compile("\"" + key + "\":(\\d+)").matcher(in);
        assertTrue(m.find(), () -> "no \"" + key + "\" in " + json);
        return Long.parseLong(m.group(1));
    }

    /** The members of the (flat) object {@code name} of the metrics JSON. */
    static String section(String json, String name) {
        Matcher m = Pattern.compile("\"" + name + "\":\\{([^{}]*)\\}").matcher(json);
        assertTrue(m.find(), () -> "no \"" + name + "\" object in " + json);
        return m.group(1);
    }

    /** Every deep verdict the engine produced (circuit-open fallbacks too, where reported). */
    static long verdicts(String json) {
        boolean hasCircuitOpen = section(json, "gray").contains("\"circuit_open\":");
        return metric(json, "gray", "completed") + metric(json, "gray", "timed_out")
            + metric(json, "gray", "failed") + metric(json, "gray", "saturated")
            + (hasCircuitOpen ? metric(json, "gray", "circuit_open") : 0);
    }

    static Path toml;
    static RiskEngine engine;

    @BeforeAll
    static void open() {
        String p = System.getProperty("risk.example.toml");
        assertNotNull(p, "system property risk.example.toml");
        toml = Path.of(p).toAbsolutePath().normalize();
        assertTrue(Files.isRegularFile(toml), "missing " + toml);
        engine = RiskEngine.fromPath(toml);
    }

    @AfterAll
    static void shut() {
        engine.close();
    }

    static Transaction.Builder base(long id) {
        return Transaction.builder()
            .id(id)
            .entity(1000 + id % 97)
            .timestampMs(1_767_571_200_000L + id * 1000)
            .amount(42.5, "USD")
            .mcc(5411)
            .country("US")
            .channel("pos")
            .device(7)
            .feature("txn_count_1h", 3)
            .feature("hour", 23)
            .feature("device_new", 1);
    }

    static RiskException riskError(int code, Executable e) {
        RiskException ex = assertThrows(RiskException.class, e);
        assertEquals(code, ex.code(), () -> "wrong code: " + ex);
        assertEquals(RiskException.codeName(code), ex.codeName());
        return ex;
    }

    static void checkDecision(Decision d, long id) {
        assertAll(
            () -> assertEquals(id, d.txnId()),
            () -> assertEquals(1000 + id % 97, d.entity()),
            () -> assertTrue(d.action() != Action.UNKNOWN, "action"),
            () -> assertTrue(d.tier() != Tier.UNKNOWN, "tier"),
            () -> assertTrue(d.fallback() != Fallback.UNKNOWN, "fallback"),
            () -> assertTrue(d.score() >= 0f && d.score() <= 1f, "score " + d.score()),
            () -> assertTrue(d.reasons().size() <= 8),
            () -> assertTrue(d.totalNs() > 0, "total_ns"));
    }
}
