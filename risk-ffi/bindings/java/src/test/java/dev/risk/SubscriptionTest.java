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

/** Deep-tier verdicts through a subscription: polls, shutdown and free while polling. */
class SubscriptionTest extends TestSupport {
    // ----- subscriptions -----

    @Test
    void subscriptionPollTimeoutIsEmpty() {
        try (RiskEngine e = RiskEngine.fromToml(DEEP_TOML, null); Subscription s = e.subscribe()) {
            assertEquals(Optional.empty(), s.poll(Duration.ZERO));
            // At least the timeout: a floor no machine's speed can break (there is no ceiling).
            long t0 = System.nanoTime();
            assertEquals(Optional.empty(), s.poll(Duration.ofMillis(120)));
            assertTrue(System.nanoTime() - t0 >= TimeUnit.MILLISECONDS.toNanos(120), "returned before the timeout");
            assertThrows(IllegalArgumentException.class, () -> s.poll(Duration.ofMillis(-1)));
            assertThrows(IllegalArgumentException.class, () -> s.poll(null));
        }
    }

    @Test
    void subscriptionWithoutADeepTierIsClosedAtOnce() {
        // examples/risk.toml has no deep tier: RISK_ERR_CLOSED, at once even for an hour-long
        // poll (one that waited it out is reported as hung).
        try (Subscription s = engine.subscribe()) {
            for (Duration d : new Duration[] {Duration.ZERO, HOUR}) {
                RiskException e = riskError(RiskException.ERR_CLOSED, () -> noHang("poll(" + d + ")", () -> s.poll(d)));
                assertEquals("RISK_ERR_CLOSED", e.codeName());
                assertFalse(e.detail().isEmpty());
            }
        }
    }

    @Test
    void subscriptionLifecycle() {
        RiskEngine e = RiskEngine.fromToml(CONSTANT_TOML, null);
        Subscription s1 = e.subscribe();
        Subscription s2 = e.subscribe();
        s1.close();
        s1.close();
        assertThrows(IllegalStateException.class, () -> s1.poll(Duration.ZERO));
        riskError(RiskException.ERR_CLOSED, () -> s2.poll(Duration.ZERO)); // no deep tier
        e.close(); // closes s2 too
        assertThrows(IllegalStateException.class, () -> s2.poll(Duration.ZERO));
    }

    /**
     * After shutdown (the engine not freed) no verdict will ever come: RISK_ERR_CLOSED, at once,
     * for a poll made after it and for one already waiting (an hour) when it happened. The
     * waiting thread signals right before its poll; whether the shutdown then lands while it
     * waits inside the library or just before it gets there, the answer is the same.
     */
    @Test
    void pollOnAShutDownEngineIsClosed() throws Exception {
        ExecutorService one = Executors.newSingleThreadExecutor();
        try (RiskEngine e = RiskEngine.fromToml(DEEP_TOML, null); Subscription s = e.subscribe();
                Subscription s2 = e.subscribe()) {
            CountDownLatch polling = new CountDownLatch(1);
            Future<Optional<Verdict>> waiting = one.submit(() -> {
                polling.countDown();
                return s2.poll(HOUR);
            });
            assertTrue(polling.await(1, TimeUnit.MINUTES));
            assertEquals(new ShutdownReport(0, 0), e.shutdown(Duration.ZERO));
            ExecutionException ex = assertThrows(ExecutionException.class,
                () -> waiting.get(HANG.toSeconds(), TimeUnit.SECONDS), "the waiting poll returned instead of RISK_ERR_CLOSED");
            RiskException closed = assertInstanceOf(RiskException.class, ex.getCause());
            assertEquals(RiskException.ERR_CLOSED, closed.code(), closed::getMessage);
            expectClosed("poll after shutdown", s);
            expectClosed("poll again after shutdown", s2);
        } finally {
            one.shutdownNow();
        }
    }

    @Test
    void afterTheEngineIsFreedBufferedVerdictsThenClosed() throws InterruptedException {
        // Raw handles: RiskEngine.close() would close its subscriptions too.
        long h = RiskNative.engineNewFromToml(DEEP_TOML.getBytes(StandardCharsets.UTF_8), null);
        long s = RiskNative.subscribe(h);
        long waiter = RiskNative.subscribe(h);
        try {
            long[] d = new long[RiskNative.DECISION_LONGS];
            RiskNative.decideJson(h, "{\"id\": 41, \"amount\": 5, \"currency\": \"USD\"}"
                .getBytes(StandardCharsets.UTF_8), d);
            long ticket = Decision.fromLongs(d, 0).ticket();
            assertTrue(ticket != 0);
            // Knowing the verdict is buffered without sleeping: a second subscription blocks
            // until it receives it. The deep tier hands a verdict to every subscriber under one
            // lock that shutdown also takes, so once the waiter has it, s has it too.
            long[] w = new long[RiskNative.VERDICT_LONGS];
            assertTrue(noHang("waiting for the verdict", () -> RiskNative.poll(waiter, HOUR_MS, w)));
            assertEquals(ticket, Verdict.fromLongs(w).ticket());
            RiskNative.engineFree(h);
            long[] v = new long[RiskNative.VERDICT_LONGS];
            assertTrue(RiskNative.poll(s, 0, v)); // already buffered: no waiting needed
            assertEquals(ticket, Verdict.fromLongs(v).ticket());
            riskError(RiskException.ERR_CLOSED, () -> noHang("poll after the buffered verdict", () -> RiskNative.poll(s, HOUR_MS, v)));
            riskError(RiskException.ERR_CLOSED, () -> noHang("the waiter after its verdict", () -> RiskNative.poll(waiter, HOUR_MS, w)));
        } finally {
            RiskNative.engineFree(h);
            RiskNative.subscriptionFree(s);
            RiskNative.subscriptionFree(waiter);
        }
    }

    /**
     * A raw poll already waiting (an hour) when the engine is freed ends with RISK_ERR_CLOSED
     * once the deep tier stops (raw handles: {@link RiskEngine#close()} would close the
     * subscription first). The poller signals right before its call; whether the free lands
     * while it waits or just before, the answer is the same.
     */
    @Test
    void aPollWaitingWhenTheEngineIsFreedIsClosed() throws Exception {
        long h = RiskNative.engineNewFromToml(DEEP_TOML.getBytes(StandardCharsets.UTF_8), null);
        long s = RiskNative.subscribe(h);
        ExecutorService one = Executors.newSingleThreadExecutor();
        try {
            CountDownLatch polling = new CountDownLatch(1);
            Future<Boolean> waiting = one.submit(() -> {
                polling.countDown();
                return RiskNative.poll(s, HOUR_MS, new long[RiskNative.VERDICT_LONGS]);
            });
            assertTrue(polling.await(1, TimeUnit.MINUTES));
            RiskNative.engineFree(h);
            ExecutionException ex = assertThrows(ExecutionException.class,
                () -> waiting.get(HANG.toSeconds(), TimeUnit.SECONDS), "the waiting poll returned instead of RISK_ERR_CLOSED");
            RiskException closed = assertInstanceOf(RiskException.class, ex.getCause());
            assertEquals(RiskException.ERR_CLOSED, closed.code(), closed::getMessage);
        } finally {
            one.shutdownNow();
            RiskNative.engineFree(h);
            RiskNative.subscriptionFree(s);
        }
    }

    @Test
    void deepVerdictArrivesOnTheSubscription() {
        try (RiskEngine e = RiskEngine.fromToml(DEEP_TOML, null); Subscription s = e.subscribe()) {
            Decision d = e.decide(Transaction.builder().id(31).entity(8).amount(5, "USD").build());
            assertEquals(Escalation.ENQUEUED, d.escalation());
            assertTrue(d.ticket() != 0);
            Verdict v = nextVerdict("waiting for the verdict", s); // returns when it arrives
            assertEquals(d.ticket(), v.ticket());
            assertEquals(31, v.txnId());
            assertEquals(8, v.entity());
            assertEquals(0.9f, v.score(), 1e-6);
            assertEquals(0, v.failure());
            assertEquals(Optional.empty(), s.poll(Duration.ZERO));
        }
    }

    /**
     * One unsliced hour-long native poll: the library holds no global lock during a call, so
     * building, using and freeing other engines meanwhile completes (else: reported as hung),
     * and the poll itself ends only when its engine is freed (RISK_ERR_CLOSED).
     *
     * <p>The poller signals right before its call; the test cannot see it enter the library.
     * If the other work ran before it got there, the test would pass without testing anything,
     * never fail spuriously; the work is repeated so that the poll is in the library for nearly
     * all of it.
     */
    @Test
    void aLongPollDoesNotStallTheRestOfTheProcess() throws Exception {
        long h = RiskNative.engineNewFromToml(DEEP_TOML.getBytes(StandardCharsets.UTF_8), null);
        long s = RiskNative.subscribe(h);
        ExecutorService one = Executors.newSingleThreadExecutor();
        try {
            CountDownLatch polling = new CountDownLatch(1);
            Future<Boolean> f = one.submit(() -> {
                polling.countDown();
                return RiskNative.poll(s, HOUR_MS, new long[RiskNative.VERDICT_LONGS]);
            });
            assertTrue(polling.await(1, TimeUnit.MINUTES));
            noHang("building, using and freeing engines during a long poll", () -> {
                for (int i = 0; i < 20; i++) {
                    try (RiskEngine other = RiskEngine.fromToml(CONSTANT_TOML, null)) {
                        other.subscribe().close();
                        other.decide(Transaction.builder().id(i).amount(1, "USD").build());
                    }
                }
                return null;
            });
            assertFalse(f.isDone(), "the hour-long poll returned before its engine was freed");
            RiskNative.engineFree(h);
            ExecutionException ex = assertThrows(ExecutionException.class,
                () -> f.get(HANG.toSeconds(), TimeUnit.SECONDS), "the poll returned instead of RISK_ERR_CLOSED");
            RiskException closed = assertInstanceOf(RiskException.class, ex.getCause());
            assertEquals(RiskException.ERR_CLOSED, closed.code(), closed::getMessage);
        } finally {
            one.shutdownNow();
            RiskNative.subscriptionFree(s);
            RiskNative.engineFree(h);
        }
    }
}
