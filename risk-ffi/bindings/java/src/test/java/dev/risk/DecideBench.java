package dev.risk;

import java.nio.file.Path;
import java.util.Locale;
import java.util.Map;
import java.util.function.Supplier;

/**
 * Per-call cost of {@link RiskEngine#decide} and {@link RiskEngine#decideJson} through JNI
 * (printed, not asserted).
 *
 * <pre>java -cp target/risk-jni-0.1.0-SNAPSHOT.jar:target/test-classes \
 *     dev.risk.DecideBench examples/risk.toml [iterations]</pre>
 *
 * The first line is the native code's first load: extracting the jar's libraries, hashing
 * them, {@code System.load} (or with {@code -Drisk.native.dir} kept from an earlier run:
 * hashing and loading; with {@code -Drisk.jni.path}: loading alone).
 *
 * The transaction is the Rust criterion bench's ({@code benches/ffi.rs}) and the engine is
 * {@code examples/risk.toml} unchanged, so the lines compare with {@code ffi/c_abi_decide}
 * and {@code ffi/c_abi_decide_json}. Each line is {@code iterations} calls after a warm-up:
 * the wall time per call and the engine's own mean {@code total_ns} over the same calls
 * ({@link Decision#totalNs()}); the difference is the overhead of Java, JNI and the C ABI.
 * Lines: the transaction built once; the same as JSON text; the transaction built per call
 * (adds the Java-side builder and UTF-8 encoding); a constant-scorer engine whose own work
 * is tiny.
 */
public final class DecideBench {
    /** benches/ffi.rs's transaction as JSON. */
    static final String JSON = "{\"id\": 7, \"entity\": 42, \"timestamp_ms\": 1767571200000, \"amount\": 42.5, "
        + "\"currency\": \"USD\", \"mcc\": 5411, \"country\": \"US\", \"channel\": \"pos\", \"device\": 9, "
        + "\"features\": {\"txn_count_1h\": 3, \"hour\": 14, \"device_new\": 0}}";

    private DecideBench() {}

    public static void main(String[] args) {
        if (args.length < 1) {
            System.err.println("usage: DecideBench risk.toml [iterations]");
            System.exit(2);
        }
        Path toml = Path.of(args[0]);
        int iters = args.length > 1 ? Integer.parseInt(args[1]) : 200_000;
        int warm = Math.max(20_000, iters / 5);
        long l0 = System.nanoTime();
        String version = RiskEngine.version();
        System.out.printf(Locale.ROOT, "%-40s %8.1f ms   (library %s)%n", "native code's first load",
            (System.nanoTime() - l0) / 1e6, version);
        try (RiskEngine full = RiskEngine.fromPath(toml);
             RiskEngine constant = RiskEngine.fromToml(Configs.load(Configs.dirBeside(toml), "rules_only.toml", Map.of()), null)) {
            Transaction t = txn();
            run("decide, prebuilt txn (~ c_abi_decide)", () -> full.decide(t), warm, iters);
            run("decideJson (~ c_abi_decide_json)", () -> full.decideJson(JSON), warm, iters);
            run("decide, txn built per call", () -> full.decide(txn()), warm, iters);
            Transaction c = Transaction.builder().id(7).amount(42.5, "USD").build();
            run("decide, constant engine", () -> constant.decide(c), warm, iters);
        }
        if (sink == 42) {
            System.out.println();
        }
    }

    /** benches/ffi.rs's transaction. */
    static Transaction txn() {
        return Transaction.builder().id(7).entity(42).timestampMs(1_767_571_200_000L)
            .amount(42.5, "USD").mcc(5411).country("US").channel("pos").device(9)
            .feature("txn_count_1h", 3.0).feature("hour", 14.0).feature("device_new", 0.0).build();
    }

    static long sink;

    static void run(String what, Supplier<Decision> call, int warm, int n) {
        for (int i = 0; i < warm; i++) {
            sink += call.get().action().ordinal();
        }
        long engineNs = 0;
        long t0 = System.nanoTime();
        for (int i = 0; i < n; i++) {
            Decision d = call.get();
            engineNs += d.totalNs();
            sink += d.action().ordinal();
        }
        long ns = System.nanoTime() - t0;
        System.out.printf(Locale.ROOT, "%-40s %8.0f ns/call   engine mean total_ns %7.0f   (%d calls after warm-up)%n",
            what, (double) ns / n, (double) engineNs / n, n);
    }
}
