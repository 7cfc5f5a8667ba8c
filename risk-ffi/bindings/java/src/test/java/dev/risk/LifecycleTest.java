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

/** Building engines (configuration errors, base directories), metrics, reload, shutdown, close. */
class LifecycleTest extends TestSupport {
    // ----- construction, metrics, reload -----

    @Test
    void configErrors() {
        RiskException e = riskError(RiskException.ERR_CONFIG, () -> RiskEngine.fromPath("/nonexistent/risk.toml"));
        assertTrue(e.detail().contains("/nonexistent/risk.toml"), e.getMessage());
        e = riskError(RiskException.ERR_CONFIG, () -> RiskEngine.fromToml(CONSTANT_TOML + "[gray]\nband = [0.7, 0.3]\n", null));
        assertTrue(e.detail().contains("gray.band"), e.getMessage());
        riskError(RiskException.ERR_CONFIG, () -> RiskEngine.fromToml("not toml [", null));
    }

    /** A Redis password in a URL or its own key, and a too-short pseudonymisation key, fail the
     *  build with an exception that names the key or server, never the value. */
    @Test
    void noSecretReachesAnException() {
        String secret = "Java-Secret-Value-Never-Shown-3";
        String[] cases = {
            "[state]\n[state.redis]\nurl = \"redis://risk:" + secret + "@127.0.0.1:1/\"\ntimeout_ms = 200\n",
            "[state]\n[state.redis]\nurl = \"redis://127.0.0.1:1/\"\nusername = \"risk\"\npassword = \""
                + secret + "\"\ntimeout_ms = 200\n",
            "[privacy]\nkey = \"" + secret.substring(0, 12) + "\"\n",
        };
        for (String extra : cases) {
            RiskException e = riskError(RiskException.ERR_CONFIG, () -> RiskEngine.fromToml(CONSTANT_TOML + "\n" + extra, null));
            String text = e.getMessage() + e.detail() + e;
            assertFalse(text.contains(secret.substring(0, 12)), text);
        }
    }

    @Test
    void fromTomlTextWithBaseDir() throws IOException {
        String text = Files.readString(toml, StandardCharsets.UTF_8);
        try (RiskEngine e = RiskEngine.fromToml(text, toml.getParent())) {
            checkDecision(e.decide(base(11).build()), 11);
            e.reloadRules();
        }
        // Without the base dir the relative rule/model paths do not resolve (unless the
        // current directory happens to be examples/).
        if (!Path.of("").toAbsolutePath().equals(toml.getParent())) {
            riskError(RiskException.ERR_CONFIG, () -> RiskEngine.fromToml(text, Path.of("/nonexistent-dir")));
        }
    }

    @Test
    void reloadWithoutARuleFileIsReloadError() {
        try (RiskEngine e = RiskEngine.fromToml(CONSTANT_TOML, null)) {
            riskError(RiskException.ERR_RELOAD, e::reloadRules);
            Decision d = e.decide(Transaction.builder().id(12).amount(3, "USD").build());
            assertEquals(12, d.txnId());
        }
    }

    @Test
    void reloadRules() {
        assertDoesNotThrow(engine::reloadRules);
    }

    @Test
    void metricsJson() {
        engine.decide(base(13).build());
        String m = engine.metricsJson();
        assertTrue(m.startsWith("{") && m.endsWith("}"), m);
        assertTrue(m.contains("\"decisions\""), m);
        assertTrue(m.contains("\"latency\""), m);
    }

    /** CONSTANT_TOML has no fast tier: the rule tier decides every transaction. */
    @Test
    void metricsText() {
        RiskEngine e = RiskEngine.fromToml(CONSTANT_TOML, null);
        String t;
        try {
            for (int i = 1; i <= 3; i++) {
                assertEquals(Tier.RULES, e.decide(Transaction.builder().id(i).amount(10, "USD").build()).tier());
            }
            t = e.metricsText();
        } finally {
            e.close();
        }
        assertTrue(t.contains("risk_decisions_by_tier_total{tier=\"rules\"} 3\n"), t);
        assertTrue(t.contains("risk_decisions_total{action=\"approve\"} 3\n"), t);
        assertTrue(t.contains("# TYPE risk_decide_latency_seconds histogram\n"), t);
        assertTrue(t.contains("risk_decide_latency_seconds_bucket{le=\"+Inf\",stage=\"total\"} 3\n"), t);
        assertTrue(t.strip().endsWith("# EOF"), t);
        assertThrows(IllegalStateException.class, e::metricsText);
    }

    // ----- lifecycle -----

    @Test
    void shutdownThenDecideIsShutDown() {
        try (RiskEngine e = RiskEngine.fromPath(toml)) {
            checkDecision(e.decide(base(14).build()), 14);
            // examples/risk.toml has no deep tier: nothing can have been queued.
            assertEquals(new ShutdownReport(0, 0), e.shutdown(Duration.ZERO));
            riskError(RiskException.ERR_SHUT_DOWN, () -> e.decide(base(15).build()));
            assertFalse(e.isClosed());
            assertEquals(1, metric(e.metricsJson(), null, "decisions")); // refused ones not counted
            assertEquals(new ShutdownReport(0, 0), e.shutdown(Duration.ofMillis(1))); // again: harmless
        }
    }

    @Test
    void shutdownAbandonCountsExactlyTheQueuedItems() {
        try (RiskEngine e = RiskEngine.fromToml(stuckDeepToml(64), null); Subscription s = e.subscribe()) {
            for (int i = 1; i <= 5; i++) {
                assertEquals(Escalation.ENQUEUED, e.decide(Transaction.builder().id(i).amount(5, "USD").build()).escalation());
            }
            String m = e.metricsJson();
            assertEquals(List.of(5L, 5L, 0L), List.of(metric(m, "gray", "enqueued"), metric(m, "gray", "queue_len"), verdicts(m)));
            assertEquals(new ShutdownReport(0, 5), e.shutdown(Duration.ZERO));
            String after = e.metricsJson();
            assertEquals(List.of(5L, 0L, 0L),
                List.of(metric(after, "gray", "enqueued"), metric(after, "gray", "queue_len"), verdicts(after)));
            assertEquals(new ShutdownReport(0, 0), e.shutdown(Duration.ZERO)); // nothing counted twice
            expectClosed("poll after an abandoning shutdown", s);
        }
    }

    /**
     * max_batch 4 and six items: the first four go as one batch the moment the fourth is
     * queued, the last two wait for two more or an hour, so a 50 ms drain finds them still
     * queued. Exact counts whatever the machine's speed (the 50 ms only decides how long the
     * drain waits, not what it finds).
     */
    @Test
    void shutdownDrainThatTimesOutAbandonsTheRest() {
        try (RiskEngine e = RiskEngine.fromToml(stuckDeepToml(4), null); Subscription s = e.subscribe()) {
            Set<Long> firstFour = new HashSet<>();
            for (int i = 1; i <= 6; i++) {
                Decision d = e.decide(Transaction.builder().id(i).amount(5, "USD").build());
                assertEquals(Escalation.ENQUEUED, d.escalation());
                if (i <= 4) {
                    firstFour.add(d.ticket());
                }
            }
            Set<Long> got = new HashSet<>();
            for (int k = 0; k < 4; k++) {
                got.add(nextVerdict("verdict " + k + " of the first batch", s).ticket());
            }
            assertEquals(firstFour, got);
            assertEquals(2, metric(e.metricsJson(), "gray", "queue_len"));
            assertEquals(new ShutdownReport(0, 2), e.shutdown(Duration.ofMillis(50)));
            String m = e.metricsJson();
            assertEquals(List.of(6L, 0L, 4L), List.of(metric(m, "gray", "enqueued"), metric(m, "gray", "queue_len"), verdicts(m)));
            expectClosed("poll after the drain", s);
        }
    }

    /** A drain that completes: nothing abandoned, one verdict per enqueued item. */
    @Test
    void shutdownDrainFinishesQueuedWork() {
        try (RiskEngine e = RiskEngine.fromToml(DEEP_TOML, null); Subscription s = e.subscribe()) {
            Set<Long> tickets = new HashSet<>();
            for (int i = 1; i <= 5; i++) {
                Decision d = e.decide(Transaction.builder().id(i).amount(5, "USD").build());
                assertEquals(Escalation.ENQUEUED, d.escalation());
                tickets.add(d.ticket());
            }
            long before = verdicts(e.metricsJson()); // those the shutdown cannot count as drained
            // An hour-long drain: it must end because the queue emptied (else: hung).
            ShutdownReport r = noHang("draining shutdown", () -> e.shutdown(HOUR));
            assertEquals(0, r.abandoned());
            assertTrue(r.drained() <= 5 - before, () -> r + " with " + before + " verdicts before the shutdown");
            String m = e.metricsJson();
            assertEquals(List.of(5L, 0L, 5L), List.of(metric(m, "gray", "enqueued"), metric(m, "gray", "queue_len"), verdicts(m)));
            Set<Long> got = new HashSet<>();
            for (int k = 0; k < 5; k++) {
                got.add(nextVerdict("verdict " + k, s).ticket());
            }
            assertEquals(tickets, got);
            expectClosed("poll after the five verdicts", s);
        }
    }

    @Test
    void useAfterClose() {
        RiskEngine e = RiskEngine.fromToml(CONSTANT_TOML, null);
        Transaction t = Transaction.builder().amount(1, "USD").build();
        e.decide(t);
        e.close();
        assertTrue(e.isClosed());
        assertThrows(IllegalStateException.class, () -> e.decide(t));
        assertThrows(IllegalStateException.class, () -> e.decideJson("{\"amount\": 1, \"currency\": \"USD\"}"));
        assertThrows(IllegalStateException.class, () -> e.decideBatch(List.of(t)));
        assertThrows(IllegalStateException.class, () -> e.decideBatch(List.of()));
        assertThrows(IllegalStateException.class, e::metricsJson);
        assertThrows(IllegalStateException.class, e::metricsText);
        assertThrows(IllegalStateException.class, e::reloadRules);
        assertThrows(IllegalStateException.class, () -> e.shutdown(Duration.ZERO));
        assertThrows(IllegalStateException.class, e::subscribe);
    }

    @Test
    void doubleClose() {
        RiskEngine e = RiskEngine.fromToml(CONSTANT_TOML, null);
        Subscription s = e.subscribe();
        e.close();
        assertDoesNotThrow(e::close);
        assertDoesNotThrow(s::close);
        assertTrue(e.isClosed());
    }

    @Test
    void freedHandleIsRefusedByTheLibrary() {
        long h = RiskNative.engineNewFromToml(CONSTANT_TOML.getBytes(StandardCharsets.UTF_8), null);
        assertTrue(h != 0);
        RiskNative.engineFree(h);
        RiskNative.engineFree(h); // documented: harmless
        RiskNative.engineFree(0);
        riskError(RiskException.ERR_HANDLE, () -> RiskNative.metricsJson(h));
        riskError(RiskException.ERR_HANDLE, () -> RiskNative.metricsText(h));
        riskError(RiskException.ERR_HANDLE, () -> RiskNative.decideJson(h, "{}".getBytes(StandardCharsets.UTF_8), new long[32]));
        // Handles are never reused: new engines do not make the stale one live again.
        long[] others = new long[4];
        try {
            for (int i = 0; i < others.length; i++) {
                others[i] = RiskNative.engineNewFromToml(CONSTANT_TOML.getBytes(StandardCharsets.UTF_8), null);
                assertTrue(others[i] != h);
            }
            riskError(RiskException.ERR_HANDLE, () -> RiskNative.metricsJson(h));
        } finally {
            for (long o : others) {
                RiskNative.engineFree(o);
            }
        }
    }
}
