package dev.risk;

import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.locks.StampedLock;

/**
 * Deep-tier verdicts from one engine ({@code risk_subscription *}), from the moment of
 * {@link RiskEngine#subscribe()} on. The channel is bounded: a slow reader loses verdicts
 * (counted by the engine) rather than blocking the deep tier. Thread-safe; {@link #close()}
 * is idempotent and waits for a poll in flight.
 *
 * <p>A long {@link #poll(Duration)} is split into native waits of at most
 * {@value #SLICE_MS} ms: the library holds its process-wide handle lock for the whole of a
 * poll, so one long native poll would stall every engine creation, free and subscription
 * in the process (and, since waiting writers block new readers, every other call too).
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
     * Waits up to {@code timeout} for the next verdict; empty when none came. A zero
     * timeout only looks. After the engine is closed this returns empty at once (or throws
     * {@link IllegalStateException} once the subscription itself is closed).
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
            long sliceStart = System.nanoTime();
            long stamp = lock.readLock();
            try {
                long h = handle;
                if (h == 0) {
                    throw new IllegalStateException("Subscription is closed");
                }
                got = RiskNative.poll(h, sliceMs, out);
            } finally {
                lock.unlockRead(stamp);
            }
            if (got) {
                return Optional.of(Verdict.fromLongs(out));
            }
            if (sliceMs == 0) {
                return Optional.empty();
            }
            // RISK_ERR_EMPTY well before the slice ran out: the library's channel reports
            // "disconnected" (the engine's deep tier is gone) as EMPTY too, at once. Stop
            // rather than spin on it until the deadline.
            if (System.nanoTime() - sliceStart < sliceMs * 500_000L) {
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
