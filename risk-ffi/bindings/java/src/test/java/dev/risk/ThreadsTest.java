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

/** Many threads on one engine; close while calls are in flight. */
class ThreadsTest extends TestSupport {
    // ----- threads -----

    @Test
    void sixteenThreadsShareOneEngine() throws Exception {
        int threads = 16;
        int perThread = 2000;
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        CountDownLatch start = new CountDownLatch(1);
        // The shared engine is used by other tests, but one at a time: an exact delta.
        long before = metric(engine.metricsJson(), null, "decisions");
        try {
            List<Future<Long>> fs = new ArrayList<>();
            for (int k = 0; k < threads; k++) {
                long first = 1_000_000L * (k + 1);
                fs.add(pool.submit(() -> {
                    start.await();
                    long ok = 0;
                    for (int i = 0; i < perThread; i++) {
                        long id = first + i;
                        Decision d = engine.decide(base(id).build());
                        if (d.txnId() != id || d.action() == Action.UNKNOWN) {
                            throw new AssertionError("bad decision for " + id + ": " + d);
                        }
                        ok++;
                    }
                    return ok;
                }));
            }
            start.countDown();
            long total = 0;
            for (Future<Long> f : fs) {
                total += f.get(5, TimeUnit.MINUTES);
            }
            assertEquals((long) threads * perThread, total);
        } finally {
            pool.shutdownNow();
        }
        assertEquals(before + (long) threads * perThread, metric(engine.metricsJson(), null, "decisions"));
    }

    @Test
    void closeWaitsForCallsInFlightAndLaterCallsFailCleanly() throws Exception {
        RiskEngine e = RiskEngine.fromPath(toml);
        int threads = 8;
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        CountDownLatch running = new CountDownLatch(threads);
        AtomicLong decided = new AtomicLong();
        try {
            List<Future<String>> fs = new ArrayList<>();
            for (int k = 0; k < threads; k++) {
                long first = 10_000_000L * (k + 1);
                fs.add(pool.submit(() -> {
                    for (long i = 0; ; i++) {
                        try {
                            e.decide(base(first + i).build());
                            decided.incrementAndGet();
                        } catch (IllegalStateException closed) {
                            return "closed";
                        }
                        // (No RISK_ERR_SHUT_DOWN is possible: close() takes the write lock, so
                        // no call is in flight when it frees the engine. Any RiskException
                        // fails the test.)
                        if (i == 0) {
                            running.countDown();
                        }
                    }
                }));
            }
            assertTrue(running.await(2, TimeUnit.MINUTES));
            e.close();
            for (Future<String> f : fs) {
                assertEquals("closed", f.get(2, TimeUnit.MINUTES));
            }
            assertTrue(decided.get() >= threads);
        } finally {
            pool.shutdownNow();
            e.close();
        }
    }
}
