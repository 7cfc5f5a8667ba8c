package dev.risk;

import java.nio.file.Path;
import java.util.Locale;

/**
 * Per-call cost of {@link RiskEngine#decide} through JNI (printed, not asserted).
 *
 * <pre>java -Drisk.jni.path=.../librisk_jni.so -cp target/classes:target/test-classes \
 *     dev.risk.DecideBench examples/risk.toml [iterations]</pre>
 *
 * Three numbers, each over {@code iterations} calls after a warm-up: the example engine
 * with a transaction built once (binding + engine), the same with a new Transaction per call
 * (adds the Java-side builder and UTF-8 encoding), and a constant-scorer engine whose own
 * work is tiny (the binding's overhead plus the engine's fixed cost).
 */
public final class DecideBench {
    static final String CONSTANT_TOML =
        "[schema]\nfields = [{ name = \"amount\", kind = \"numeric\", required = true }]\n"
            + "[rules.scorer]\nkind = \"constant\"\nprobability = 0.1\n";

    private DecideBench() {}

    public static void main(String[] args) {
        if (args.length < 1) {
            System.err.println("usage: DecideBench risk.toml [iterations]");
            System.exit(2);
        }
        Path toml = Path.of(args[0]);
        int iters = args.length > 1 ? Integer.parseInt(args[1]) : 200_000;
        int warm = Math.max(20_000, iters / 5);
        try (RiskEngine full = RiskEngine.fromPath(toml);
             RiskEngine constant = RiskEngine.fromToml(CONSTANT_TOML, null)) {
            Transaction t = txn(1);
            time(full, t, warm);
            report("decide, example engine, prebuilt txn", time(full, t, iters), iters);
            timeBuild(full, warm);
            report("decide, example engine, txn built per call", timeBuild(full, iters), iters);
            Transaction c = Transaction.builder().id(1).amount(10, "USD").build();
            time(constant, c, warm);
            report("decide, constant engine (binding + fixed cost)", time(constant, c, iters), iters);
        }
        if (sink == 42) {
            System.out.println();
        }
    }

    static Transaction txn(long i) {
        return Transaction.builder().id(i).entity(1000 + i % 97).timestampMs(1_767_571_200_000L + i * 1000)
            .amount(42.5, "USD").mcc(5411).country("US").channel("pos").device(7)
            .feature("txn_count_1h", 3).feature("hour", 23).feature("device_new", 1).build();
    }

    static long sink;

    static long time(RiskEngine e, Transaction t, int n) {
        long t0 = System.nanoTime();
        for (int i = 0; i < n; i++) {
            sink += e.decide(t).action().ordinal();
        }
        return System.nanoTime() - t0;
    }

    static long timeBuild(RiskEngine e, int n) {
        long t0 = System.nanoTime();
        for (int i = 0; i < n; i++) {
            sink += e.decide(txn(i)).action().ordinal();
        }
        return System.nanoTime() - t0;
    }

    static void report(String what, long ns, int n) {
        System.out.printf(Locale.ROOT, "%-48s %9.0f ns/call (%d calls after warm-up)%n", what, (double) ns / n, n);
    }
}
