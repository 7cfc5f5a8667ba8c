package dev.risk;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.channels.OverlappingFileLockException;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFileAttributes;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HexFormat;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.stream.Stream;

/**
 * Loads the native code the jar carries: {@code native/<os>-<arch>/} holds
 * {@code librisk_ffi.so} (the C ABI), {@code librisk_jni.so} (the glue, run path
 * {@code $ORIGIN}) and {@code libs.sha256} ({@code <sha256> <size> <name>} per library, in
 * load order).
 *
 * <p>Where it goes, in order:
 * <ol>
 *   <li>{@code -Drisk.jni.path=/abs/librisk_jni.so}: that glue, loaded as is (a development
 *       build; nothing is extracted).</li>
 *   <li>{@code -Drisk.native.dir=DIR}: a directory kept between runs (for hosts whose temporary
 *       directory is mounted {@code noexec}). Created 0700 if missing; refused when another user
 *       owns it or others can write to it. Files already there are kept when their size and
 *       SHA-256 match the jar's, and replaced otherwise (a corrupted or older library).</li>
 *   <li>Otherwise a new directory {@code risk-native-*} (0700) under {@code risk.native.tmpdir}
 *       (default {@code java.io.tmpdir}), deleted when the JVM exits; one left by a JVM that
 *       died (its lock file no longer held) is deleted by the next one that starts.</li>
 * </ol>
 * Every file is written 0600 under a temporary name, hashed while written, checked against
 * {@code libs.sha256} and only then renamed into place, so a reader never sees half a library
 * and a damaged jar is refused with the name of the file. Each class loader that loads this
 * class extracts its own copy (the JVM binds a native library to one class loader).
 */
final class NativeLoader {
    /** System property: the glue to load instead of the jar's. */
    static final String JNI_PATH = "risk.jni.path";
    /** System property: a kept extraction directory. */
    static final String NATIVE_DIR = "risk.native.dir";
    /** System property: where per-process extraction directories go. */
    static final String NATIVE_TMPDIR = "risk.native.tmpdir";
    /** The prefix of per-process extraction directories. */
    static final String PREFIX = "risk-native-";
    /** The lock file a live JVM holds in its extraction directory. */
    static final String LOCK = ".lock";
    private static final Set<PosixFilePermission> DIR_MODE = PosixFilePermissions.fromString("rwx------");
    private static final Set<PosixFilePermission> FILE_MODE = PosixFilePermissions.fromString("rw-------");
    private static final int MAX_LIBS = 16;
    private static final long MAX_LIB_BYTES = 1L << 30;

    /** Held for the life of the class loader: it marks the directory as in use. */
    private static FileChannel lockChannel;

    private NativeLoader() {}

    /** One library the jar carries. */
    record Lib(String name, long size, String sha256) {}

    /** What {@link #extract} did: the libraries' paths in load order, and how many it wrote. */
    record Extracted(List<Path> paths, int written) {
        /** The glue: the last library, the one {@code System.load} is given. */
        Path glue() {
            return paths.get(paths.size() - 1);
        }
    }

    /** Loads the glue (and through it the C ABI library); called once per class loader. */
    static synchronized void load() {
        String override = System.getProperty(JNI_PATH);
        if (override != null && !override.isEmpty()) {
            System.load(Path.of(override).toAbsolutePath().toString());
            return;
        }
        String platform = platform(System.getProperty("os.name"), System.getProperty("os.arch"));
        try {
            String kept = System.getProperty(NATIVE_DIR);
            Path dir;
            if (kept != null && !kept.isEmpty()) {
                dir = Path.of(kept).toAbsolutePath();
            } else {
                Path base = Path.of(System.getProperty(NATIVE_TMPDIR, System.getProperty("java.io.tmpdir")));
                sweepStale(base);
                dir = Files.createTempDirectory(base, PREFIX, PosixFilePermissions.asFileAttribute(DIR_MODE));
                lockChannel = FileChannel.open(dir.resolve(LOCK), Set.of(StandardOpenOption.CREATE_NEW,
                    StandardOpenOption.WRITE), PosixFilePermissions.asFileAttribute(FILE_MODE));
                lockChannel.lock();
                Path made = dir;
                Runtime.getRuntime().addShutdownHook(new Thread(() -> deleteTree(made), "risk-native-cleanup"));
            }
            System.load(extract(platform, dir).glue().toString());
        } catch (IOException e) {
            UnsatisfiedLinkError err = new UnsatisfiedLinkError(
                "risk: cannot extract the native library for " + platform + ": " + e.getMessage()
                    + " (set -D" + NATIVE_DIR + " to a private directory on an exec-mounted file system,"
                    + " or -D" + JNI_PATH + ")");
            err.initCause(e);
            throw err;
        }
    }

    /** {@code <os>-<arch>} of the jar's layout, e.g. {@code linux-x86_64}. */
    static String platform(String osName, String osArch) {
        String os = osName == null ? "" : osName.toLowerCase(Locale.ROOT);
        String arch = osArch == null ? "" : osArch.toLowerCase(Locale.ROOT);
        String o = os.startsWith("linux") ? "linux" : os.startsWith("mac") ? "macos"
            : os.startsWith("windows") ? "windows" : os.replaceAll("[^a-z0-9]", "");
        String a = switch (arch) {
            case "amd64", "x86_64", "x86-64" -> "x86_64";
            case "aarch64", "arm64" -> "aarch64";
            default -> arch.replaceAll("[^a-z0-9_]", "");
        };
        return o + "-" + a;
    }

    /** The jar's list for {@code platform}; an error names the platform when it carries none. */
    static List<Lib> manifest(String platform) throws IOException {
        String list = "native/" + platform + "/libs.sha256";
        try (InputStream in = NativeLoader.class.getClassLoader().getResourceAsStream(list)) {
            if (in == null) {
                throw new IOException("this jar carries no native library for " + platform
                    + " (" + list + " is missing; it is built for linux-x86_64)");
            }
            byte[] bytes = in.readNBytes(64 * 1024);
            List<Lib> libs = new ArrayList<>();
            for (String line : new String(bytes, StandardCharsets.UTF_8).split("\n")) {
                if (line.isBlank()) {
                    continue;
                }
                String[] f = line.trim().split(" ");
                if (f.length != 3 || !f[0].matches("[0-9a-f]{64}") || !f[1].matches("[0-9]{1,10}")
                    || !f[2].matches("[A-Za-z0-9_.-]+\\.so") || Long.parseLong(f[1]) > MAX_LIB_BYTES) {
                    throw new IOException(list + ": malformed line '" + line + "'");
                }
                libs.add(new Lib(f[2], Long.parseLong(f[1]), f[0]));
            }
            if (libs.isEmpty() || libs.size() > MAX_LIBS) {
                throw new IOException(list + " lists " + libs.size() + " libraries");
            }
            return libs;
        }
    }

    /**
     * Puts the jar's libraries for {@code platform} into {@code dir} (created 0700 if missing),
     * keeping each file that already matches and replacing the others.
     */
    static Extracted extract(String platform, Path dir) throws IOException {
        List<Lib> libs = manifest(platform);
        if (!Files.exists(dir, LinkOption.NOFOLLOW_LINKS)) {
            Files.createDirectories(dir, PosixFilePermissions.asFileAttribute(DIR_MODE));
        }
        checkPrivate(dir);
        List<Path> paths = new ArrayList<>();
        int written = 0;
        for (Lib lib : libs) {
            Path target = dir.resolve(lib.name());
            if (!matches(target, lib)) {
                write(platform, dir, lib, target);
                written++;
            }
            paths.add(target);
        }
        return new Extracted(paths, written);
    }

    /** Refuses a directory that is a link, is another user's, or that others can write to. */
    static void checkPrivate(Path dir) throws IOException {
        PosixFileAttributes a = Files.readAttributes(dir, PosixFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
        if (!a.isDirectory()) {
            throw new IOException(dir + " is not a directory");
        }
        String me = System.getProperty("user.name");
        if (!a.owner().getName().equals(me)) {
            throw new IOException(dir + " belongs to " + a.owner().getName() + ", not to " + me);
        }
        Set<PosixFilePermission> p = a.permissions();
        if (p.contains(PosixFilePermission.GROUP_WRITE) || p.contains(PosixFilePermission.OTHERS_WRITE)) {
            throw new IOException(dir + " can be written by others (mode "
                + PosixFilePermissions.toString(p) + "); a library loaded from it could be replaced");
        }
    }

    /** True when {@code path} is a regular file of {@code lib}'s size and hash. */
    static boolean matches(Path path, Lib lib) throws IOException {
        if (!Files.isRegularFile(path, LinkOption.NOFOLLOW_LINKS) || Files.size(path) != lib.size()) {
            return false;
        }
        MessageDigest md = sha256();
        try (InputStream in = Files.newInputStream(path)) {
            byte[] buf = new byte[1 << 16];
            for (int n; (n = in.read(buf)) > 0; ) {
                md.update(buf, 0, n);
            }
        }
        return HexFormat.of().formatHex(md.digest()).equals(lib.sha256());
    }

    private static void write(String platform, Path dir, Lib lib, Path target) throws IOException {
        String resource = "native/" + platform + "/" + lib.name();
        Path tmp = Files.createTempFile(dir, ".part-", ".so", PosixFilePermissions.asFileAttribute(FILE_MODE));
        try {
            MessageDigest md = sha256();
            long size = 0;
            try (InputStream in = NativeLoader.class.getClassLoader().getResourceAsStream(resource);
                 OutputStream out = Files.newOutputStream(tmp, StandardOpenOption.TRUNCATE_EXISTING)) {
                if (in == null) {
                    throw new IOException("the jar lists " + resource + " but does not carry it");
                }
                byte[] buf = new byte[1 << 16];
                for (int n; (n = in.read(buf)) > 0; ) {
                    size += n;
                    if (size > lib.size()) {
                        break;
                    }
                    md.update(buf, 0, n);
                    out.write(buf, 0, n);
                }
            }
            String got = HexFormat.of().formatHex(md.digest());
            if (size != lib.size() || !got.equals(lib.sha256())) {
                throw new IOException(resource + " in the jar is damaged: " + size + " bytes, sha256 " + got
                    + "; libs.sha256 says " + lib.size() + " bytes, " + lib.sha256());
            }
            Files.move(tmp, target, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        } finally {
            Files.deleteIfExists(tmp);
        }
    }

    /**
     * Deletes the {@code risk-native-*} directories under {@code base} that belong to this user
     * and whose lock no JVM holds (their JVM died before its shutdown hook ran).
     */
    static int sweepStale(Path base) {
        int swept = 0;
        try (DirectoryStream<Path> dirs = Files.newDirectoryStream(base, PREFIX + "*")) {
            String me = System.getProperty("user.name");
            for (Path d : dirs) {
                try {
                    PosixFileAttributes a = Files.readAttributes(d, PosixFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
                    // A minute's grace: a starting JVM creates its directory, then takes the lock.
                    boolean young = a.lastModifiedTime().toMillis() > System.currentTimeMillis() - 60_000;
                    if (!a.isDirectory() || young || !a.owner().getName().equals(me)
                        || !unlocked(d.resolve(LOCK))) {
                        continue;
                    }
                    deleteTree(d);
                    swept++;
                } catch (IOException | UncheckedIOException e) {
                    // Another JVM's directory, or one being deleted: not ours to judge.
                }
            }
        } catch (IOException e) {
            // An unreadable temporary directory: nothing to sweep.
        }
        return swept;
    }

    private static boolean unlocked(Path lock) throws IOException {
        if (!Files.isRegularFile(lock, LinkOption.NOFOLLOW_LINKS)) {
            return false; // being created right now, or not a directory of this loader
        }
        try (FileChannel ch = FileChannel.open(lock, StandardOpenOption.WRITE)) {
            FileLock l = ch.tryLock();
            if (l == null) {
                return false;
            }
            l.release();
            return true;
        } catch (OverlappingFileLockException e) {
            return false; // held by this JVM (another class loader)
        }
    }

    static void deleteTree(Path dir) {
        try (Stream<Path> s = Files.walk(dir)) {
            for (Path p : s.sorted(Comparator.reverseOrder()).toList()) {
                Files.deleteIfExists(p);
            }
        } catch (IOException | UncheckedIOException e) {
            // Best effort at exit: the next JVM's sweep deletes what is left.
        }
    }

    private static MessageDigest sha256() {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is missing from this JVM", e);
        }
    }
}
