package dev.risk;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;

/**
 * The engine configurations shared with the Rust, Go and Python tests
 * ({@code testdata/configs} of the repository; see its README.md).
 */
final class Configs {
    private Configs() {}

    /**
     * {@code testdata/configs}, found from the system property {@code risk.example.toml}
     * ({@code <repo>/examples/risk.toml}, set by the pom and run_tests.sh).
     */
    static Path dir() {
        String example = System.getProperty("risk.example.toml");
        if (example == null) {
            throw new IllegalStateException("system property risk.example.toml is not set");
        }
        return dirBeside(Path.of(example));
    }

    /** {@code testdata/configs} of the repository whose {@code examples/risk.toml} is {@code example}. */
    static Path dirBeside(Path example) {
        return example.toAbsolutePath().normalize().getParent().getParent().resolve("testdata").resolve("configs");
    }

    /** {@code name} without placeholders. */
    static String load(String name) {
        return load(dir(), name, Map.of());
    }

    /** {@code name} with each {@code {{KEY}}} replaced by {@code vars.get(KEY)}. */
    static String load(String name, Map<String, String> vars) {
        return load(dir(), name, vars);
    }

    /**
     * {@code dir/name} with each {@code {{KEY}}} replaced by {@code vars.get(KEY)}. Throws
     * (failing the test) when the file is missing, a value names no placeholder or a
     * placeholder is left without a value.
     */
    static String load(Path dir, String name, Map<String, String> vars) {
        String text;
        try {
            text = Files.readString(dir.resolve(name), StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new UncheckedIOException("engine config " + dir.resolve(name), e);
        }
        for (Map.Entry<String, String> v : vars.entrySet()) {
            String mark = "{{" + v.getKey() + "}}";
            if (!text.contains(mark)) {
                throw new IllegalArgumentException(name + " has no placeholder " + mark);
            }
            text = text.replace(mark, v.getValue());
        }
        if (text.contains("{{")) {
            throw new IllegalArgumentException(name + ": a placeholder is left without a value:\n" + text);
        }
        return text;
    }
}
