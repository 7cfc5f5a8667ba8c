package dev.risk;

import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.locks.StampedLock;

/**
 * Deep-tier verdicts from one engine ({@code risk_subscription *}), from the moment of
 * {@link RiskEngine#subscribe()} on. The channel is bounded: a slow reader loses verdicts
 * (counted by the engine) rather than blocking the deep tier. Thread-safe; {@link #close()}
 * is idempotent and waits for a poll in flight. Closing the engine closes its subscriptions.
 *
 * <p>A typical reader:
 * <pre>{@code
 * try (Subscription s = engine.subscribe()) {
 *     while (true) {
 *         s.poll(Duration.ofSeconds(1)).ifPresent(this::handle); // empty: timed out, poll again
 *     }
 * } catch (RiskException e) {
 *     if (e.code() != RiskException.ERR_CLOSED) throw e;       // no verdict will ever come
 * }
 * }</pre>
 *
 * <p>A long {@link #poll(Duration)} is split into native waits of at most
 * {@value #SLICE_MS} ms. The library itself blocks nothing else during a poll; the slices
 * keep {@link #close()} (and {@link RiskEngine#close()}), which wait for a poll in flight,
 * prompt.
 */
public final class Subscription implements AutoCloseable {
    static final int SLICE_MS = 50;

    private final StampedLock lock = new StampedLock();
    private long handle;
    private final RiskEngine engine;

    Subscription(long handle, RiskEngine engine) {
        this.handle = handle;
        this.engine = engine;
    }

    /**
     * Waits up to {@code timeout} for the next verdict (a zero timeout only looks).
     *
     * @return the verdict, or {@link Optional#empty()} when none came in time
     *     ({@code RISK_ERR_EMPTY}): poll again
     * @throws RiskException with {@link RiskException#ERR_CLOSED} ({@code RISK_ERR_CLOSED}),
     *     at once, when no verdict will ever come: the engine has no deep tier (such as
     *     {@code examples/risk.toml}). Stop polling. (The library also answers it once the
     *     engine is freed, but {@link RiskEngine#close()} closes this subscription first.)
     * @throws IllegalStateException once this subscription (or its engine) is closed
     */
    public Optional<Verdict> poll(Duration timeout) {
        if (timeout == null) {
            throw new IllegalArgumentException("timeout is null");
        }
        if (timeout.isNegative()) {
            throw new IllegalArgumentException("timeout is negative: " + timeout);
        }
        long[] out = new long[RiskNative.VERDICT_LONGS];
        long timeoutNs;
        try {
            timeoutNs = Math.min(timeout.toNanos(), Long.MAX_VALUE / 4);
        } catch (ArithmeticException overflow) {
            timeoutNs = Long.MAX_VALUE / 4; // ~73 years: "forever"
        }
        long deadline = System.nanoTime() + timeoutNs;
        boolean first = true;
        while (true) {
            long leftNs = deadline - System.nanoTime();
            if (!first && leftNs <= 0) {
                return Optional.empty();
            }
            int sliceMs = (int) Math.min(SLICE_MS, Math.max(0, (leftNs + 999_999) / 1_000_000));
            first = false;
            boolean got;
            long stamp = lock.readLock();
            try {
                long h = handle;
                if (h == 0) {
                    throw new IllegalStateException("Subscription is closed");
                }
                got = RiskNative.poll(h, sliceMs, out); // throws RISK_ERR_CLOSED
            } finally {
                lock.unlockRead(stamp);
            }
            if (got) {
                return Optional.of(Verdict.fromLongs(out));
            }
            if (sliceMs == 0) {
                return Optional.empty();
            }
        }
    }

    @Override
    public void close() {
        long stamp = lock.writeLock();
        try {
            if (handle == 0) {
                return;
            }
            RiskNative.subscriptionFree(handle);
            handle = 0;
        } finally {
            lock.unlockWrite(stamp);
        }
        engine.forget(this);
    }
}
