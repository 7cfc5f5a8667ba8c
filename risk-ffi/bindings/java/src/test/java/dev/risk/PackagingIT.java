package dev.risk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The packaged jar as a user gets it (failsafe runs this after {@code package}): no
 * {@code risk.jni.path}, the native code extracted from the jar.
 */
class PackagingIT {
    @TempDir
    Path tmp;

    static Path jar() {
        Path jar = Path.of(System.getProperty("risk.jar"));
        assertTrue(Files.isRegularFile(jar), jar + " was not packaged");
        return jar;
    }

    static String toml() {
        return Path.of(System.getProperty("risk.example.toml")).toAbsolutePath().toString();
    }

    @Test
    void theJarCarriesItsNativeCodeAndModuleName() throws IOException {
        try (var fs = java.nio.file.FileSystems.newFileSystem(jar())) {
            for (String f : List.of("librisk_ffi.so", "librisk_jni.so", "libs.sha256")) {
                assertTrue(Files.isRegularFile(fs.getPath("native/linux-x86_64/" + f)), f);
            }
            String manifest = Files.readString(fs.getPath("META-INF/MANIFEST.MF"));
            assertTrue(manifest.contains("Automatic-Module-Name: dev.risk"), manifest);
        }
    }

    @Test
    void twoClassLoadersEachLoadTheLibraryAndDecide() throws Exception {
        URL[] urls = {jar().toUri().toURL(), Path.of(System.getProperty("risk.test.classes")).toUri().toURL()};
        ClassLoader parent = ClassLoader.getPlatformClassLoader();
        try (URLClassLoader a = new URLClassLoader(urls, parent); URLClassLoader b = new URLClassLoader(urls, parent)) {
            List<String> decided = new ArrayList<>();
            List<Object> loaders = new ArrayList<>();
            for (ClassLoader l : List.of(a, b)) {
                Class<?> probe = Class.forName("dev.risk.PackagingProbe", true, l);
                decided.add((String) probe.getMethod("decideOnce", String.class).invoke(null, toml()));
                loaders.add(probe.getMethod("nativeLoader").invoke(null));
            }
            assertEquals(a, loaders.get(0));
            assertEquals(b, loaders.get(1));
            assertNotSame(loaders.get(0), loaders.get(1));
            assertEquals(decided.get(0), decided.get(1));
            // And this JVM's own class loader (the surefire class path) a third time.
            assertEquals(decided.get(0), PackagingProbe.decideOnce(toml()));
        }
    }

    @Test
    void aChildJvmDecidesFromAReadOnlyWorkingDirectoryAndCleansUp() throws Exception {
        Path cwd = Files.createDirectory(tmp.resolve("read-only"));
        Path tmpdir = Files.createDirectory(tmp.resolve("tmpdir"));
        Files.setPosixFilePermissions(cwd, PosixFilePermissions.fromString("r-xr-xr-x"));
        // root ignores modes: make the directory immutable too (ext4), so a write would fail.
        boolean immutable = "root".equals(System.getProperty("user.name")) && run(tmp, "chattr", "+i", cwd.toString()).exit == 0;
        try {
            Result r = java(cwd, tmpdir, List.of());
            assertEquals(0, r.exit, r.output);
            assertTrue(r.output.contains("decided "), r.output);
            try (Stream<Path> s = Files.list(cwd)) {
                assertEquals(0, s.count(), "nothing written to the working directory");
            }
            try (Stream<Path> s = Files.list(tmpdir)) {
                assertEquals(List.of(), s.map(p -> p.getFileName().toString()).toList(),
                    "the extraction directory is deleted at exit");
            }
            assertTrue(immutable || !"root".equals(System.getProperty("user.name")),
                "as root the working directory must be made immutable (chattr +i) for this test to mean anything");
        } finally {
            if (immutable) {
                run(tmp, "chattr", "-i", cwd.toString());
            }
            Files.setPosixFilePermissions(cwd, PosixFilePermissions.fromString("rwx------"));
        }
    }

    @Test
    void aKeptDirectoryIsReusedAndRepaired() throws Exception {
        Path kept = tmp.resolve("kept");
        Result first = java(tmp, tmp, List.of("-Drisk.native.dir=" + kept));
        assertEquals(0, first.exit, first.output);
        Path ffi = kept.resolve("librisk_ffi.so");
        byte[] good = Files.readAllBytes(ffi);
        byte[] bad = good.clone();
        bad[bad.length / 3] ^= 0x40;
        Files.write(ffi, bad);
        Result second = java(tmp, tmp, List.of("-Drisk.native.dir=" + kept));
        assertEquals(0, second.exit, second.output);
        assertTrue(java.util.Arrays.equals(good, Files.readAllBytes(ffi)), "the damaged library was replaced");
        assertEquals(first.output, second.output);
    }

    @Test
    void riskJniPathStillOverrides() throws Exception {
        Path missing = tmp.resolve("no-such-librisk_jni.so");
        Result r = java(tmp, tmp, List.of("-Drisk.jni.path=" + missing));
        assertTrue(r.exit != 0, r.output);
        assertTrue(r.output.contains(missing.toString()), r.output);
    }

    record Result(int exit, String output) {}

    static Result java(Path cwd, Path tmpdir, List<String> props) throws Exception {
        List<String> cmd = new ArrayList<>();
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        cmd.add("-Djava.io.tmpdir=" + tmpdir);
        cmd.addAll(props);
        cmd.add("-cp");
        cmd.add(jar() + ":" + System.getProperty("risk.test.classes"));
        cmd.add("dev.risk.PackagingProbe");
        cmd.add(toml());
        return run(cwd, cmd.toArray(String[]::new));
    }

    static Result run(Path cwd, String... cmd) throws IOException, InterruptedException {
        Process p = new ProcessBuilder(cmd).directory(cwd.toFile()).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        return new Result(p.waitFor(), out);
    }
}
