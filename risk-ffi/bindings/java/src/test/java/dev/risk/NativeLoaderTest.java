package dev.risk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.FileTime;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The extraction of the native code the build put on the class path (as the jar carries it). */
class NativeLoaderTest {
    static final String PLATFORM = "linux-x86_64";

    @TempDir
    Path tmp;

    @Test
    void platformNamesFollowTheJarLayout() {
        assertEquals("linux-x86_64", NativeLoader.platform("Linux", "amd64"));
        assertEquals("linux-x86_64", NativeLoader.platform("Linux", "x86_64"));
        assertEquals("linux-aarch64", NativeLoader.platform("Linux", "aarch64"));
        assertEquals("macos-aarch64", NativeLoader.platform("Mac OS X", "aarch64"));
        assertEquals(PLATFORM, NativeLoader.platform(System.getProperty("os.name"), System.getProperty("os.arch")));
    }

    @Test
    void anotherPlatformIsRefusedWithItsName() {
        IOException e = assertThrows(IOException.class, () -> NativeLoader.extract("freebsd-riscv64", tmp.resolve("x")));
        assertTrue(e.getMessage().contains("freebsd-riscv64"), e.getMessage());
        assertTrue(e.getMessage().contains("linux-x86_64"), e.getMessage());
    }

    @Test
    void extractsBothLibrariesPrivateAndVerified() throws IOException {
        Path dir = tmp.resolve("native");
        NativeLoader.Extracted x = NativeLoader.extract(PLATFORM, dir);
        List<NativeLoader.Lib> libs = NativeLoader.manifest(PLATFORM);
        assertEquals(List.of("librisk_ffi.so", "librisk_jni.so"), libs.stream().map(NativeLoader.Lib::name).toList());
        assertEquals(2, x.written());
        assertEquals(dir.resolve("librisk_jni.so"), x.glue());
        assertEquals("rwx------", PosixFilePermissions.toString(Files.getPosixFilePermissions(dir)));
        for (NativeLoader.Lib lib : libs) {
            Path p = dir.resolve(lib.name());
            assertEquals("rw-------", PosixFilePermissions.toString(Files.getPosixFilePermissions(p)), p.toString());
            assertTrue(NativeLoader.matches(p, lib), p.toString());
        }
        try (var s = Files.list(dir)) {
            assertEquals(2, s.count(), "no temporary file is left behind");
        }
        assertEquals(0, NativeLoader.extract(PLATFORM, dir).written(), "matching files are kept");
    }

    @Test
    void aCorruptedExtractedLibraryIsDetectedAndReplaced() throws IOException {
        Path dir = tmp.resolve("kept");
        NativeLoader.extract(PLATFORM, dir);
        Path ffi = dir.resolve("librisk_ffi.so");
        Path jni = dir.resolve("librisk_jni.so");
        long size = Files.size(ffi);
        try (RandomAccessFile f = new RandomAccessFile(ffi.toFile(), "rw")) { // one byte flipped, same size
            f.seek(size / 2);
            int b = f.read();
            f.seek(size / 2);
            f.write(b ^ 0x5a);
        }
        try (FileChannel c = FileChannel.open(jni, StandardOpenOption.WRITE)) { // truncated
            c.truncate(100);
        }
        List<NativeLoader.Lib> libs = NativeLoader.manifest(PLATFORM);
        assertFalse(NativeLoader.matches(ffi, libs.get(0)));
        assertFalse(NativeLoader.matches(jni, libs.get(1)));

        assertEquals(2, NativeLoader.extract(PLATFORM, dir).written());
        assertTrue(NativeLoader.matches(ffi, libs.get(0)));
        assertTrue(NativeLoader.matches(jni, libs.get(1)));
        assertEquals(size, Files.size(ffi));
    }

    @Test
    void aDirectoryOthersCanWriteIsRefused() throws IOException {
        Path dir = Files.createDirectory(tmp.resolve("shared"));
        Files.setPosixFilePermissions(dir, PosixFilePermissions.fromString("rwxrwxrwx"));
        IOException e = assertThrows(IOException.class, () -> NativeLoader.extract(PLATFORM, dir));
        assertTrue(e.getMessage().contains("written by others"), e.getMessage());
        try (var s = Files.list(dir)) {
            assertEquals(0, s.count(), "nothing written into it");
        }
        Path link = Files.createSymbolicLink(tmp.resolve("link"), Files.createDirectory(tmp.resolve("real")));
        assertThrows(IOException.class, () -> NativeLoader.extract(PLATFORM, link));
    }

    @Test
    void theSweepDeletesOnlyDeadJvmsDirectories() throws IOException {
        Path dead = Files.createDirectory(tmp.resolve(NativeLoader.PREFIX + "dead"));
        Files.writeString(dead.resolve(NativeLoader.LOCK), "");
        Files.writeString(dead.resolve("librisk_ffi.so"), "x");
        Path young = Files.createDirectory(tmp.resolve(NativeLoader.PREFIX + "young"));
        Files.writeString(young.resolve(NativeLoader.LOCK), "");
        Path live = Files.createDirectory(tmp.resolve(NativeLoader.PREFIX + "live"));
        Files.writeString(live.resolve(NativeLoader.LOCK), "");
        Path other = Files.createDirectory(tmp.resolve("unrelated"));
        FileTime old = FileTime.fromMillis(System.currentTimeMillis() - 3_600_000);
        for (Path d : List.of(dead, live, other)) {
            Files.setLastModifiedTime(d, old);
        }
        try (FileChannel held = FileChannel.open(live.resolve(NativeLoader.LOCK), StandardOpenOption.WRITE)) {
            held.lock();
            assertEquals(1, NativeLoader.sweepStale(tmp));
        }
        assertFalse(Files.exists(dead));
        assertTrue(Files.exists(young), "a directory just made (its lock not yet taken) is left");
        assertTrue(Files.exists(live), "a held lock is a live JVM's");
        assertTrue(Files.exists(other));
    }

    @Test
    void theLoadedLibraryCameFromTheJarsResources() {
        // This JVM loaded the glue through NativeLoader (no risk.jni.path in the pom any more).
        assertEquals(null, System.getProperty(NativeLoader.JNI_PATH));
        assertFalse(RiskEngine.version().isEmpty());
    }
}
