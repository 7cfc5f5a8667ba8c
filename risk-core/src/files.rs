//! Files the SDK writes are private to its user.
//!
//! Audit segments, list journals, state snapshots, the model directory, rule history and the
//! Kafka cursor hold card and personal data. Every one is created through this module:
//! - files `0600` and directories `0700` by default ([`FileMode::Private`]), or `0640` and
//!   `0750` ([`FileMode::Group`]) for a host whose log shipper runs in the owner's group;
//!   the mode is set at creation, whatever the umask;
//! - a directory the SDK writes into must not be writable by others (mode `o+w`): such a
//!   directory is refused with [`FilesError::OthersWritable`] (anyone could swap the files);
//! - temporary files are created exclusively (`O_EXCL`, a fresh name) next to their target,
//!   written, synced and renamed over it.
//!
//! On non-Unix targets modes are left to the platform.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// How private the files the SDK writes are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileMode {
    /// Files `0600`, directories `0700` (the default).
    #[default]
    Private,
    /// Files `0640`, directories `0750`: readable by the owner's group (a log shipper).
    Group,
}

impl FileMode {
    /// The mode bits of a file.
    pub fn file_bits(self) -> u32 {
        match self {
            Self::Private => 0o600,
            Self::Group => 0o640,
        }
    }

    /// The mode bits of a directory.
    pub fn dir_bits(self) -> u32 {
        match self {
            Self::Private => 0o700,
            Self::Group => 0o750,
        }
    }
}

/// A file or directory the SDK cannot write privately.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    /// The directory is writable by others (`o+w`): refused.
    #[error("directory {path} is writable by others (mode {mode:o}); refusing to write there")]
    OthersWritable {
        /// The directory.
        path: PathBuf,
        /// Its mode bits.
        mode: u32,
    },
    /// An I/O error, with what was being done and where.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done ("cannot create", ...).
        what: &'static str,
        /// Where.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

impl FilesError {
    fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Self + 'a {
        move |source| Self::Io {
            what,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Creates `dir` and its missing parents with `mode`'s directory bits (parents the SDK
/// creates get them too; existing ones are left alone), then refuses `dir` if others can
/// write to it.
pub fn create_dir(dir: &Path, mode: FileMode) -> Result<(), FilesError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(mode.dir_bits())
            .create(dir)
            .map_err(FilesError::io("cannot create directory", dir))?;
    }
    #[cfg(not(unix))]
    std::fs::create_dir_all(dir).map_err(FilesError::io("cannot create directory", dir))?;
    check_dir(dir)
}

/// Refuses `dir` if it is writable by others.
pub fn check_dir(dir: &Path) -> Result<(), FilesError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(dir).map_err(FilesError::io("cannot stat", dir))?;
        let bits = meta.permissions().mode() & 0o7777;
        if bits & 0o002 != 0 {
            return Err(FilesError::OthersWritable {
                path: dir.to_path_buf(),
                mode: bits,
            });
        }
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

fn options(mode: FileMode) -> OpenOptions {
    let mut o = OpenOptions::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(mode.file_bits());
    }
    #[cfg(not(unix))]
    let _ = mode;
    o
}

/// Creates `path` exclusively (it must not exist) with `mode`'s file bits, for writing.
pub fn create_new(path: &Path, mode: FileMode) -> std::io::Result<File> {
    options(mode).write(true).create_new(true).open(path)
}

/// Opens `path` for appending, creating it with `mode`'s file bits when missing (an existing
/// file keeps its mode).
pub fn open_append(path: &Path, mode: FileMode) -> std::io::Result<File> {
    options(mode).append(true).create(true).open(path)
}

/// Opens `path` for reading and writing (not truncated), creating it with `mode`'s file bits
/// when missing.
pub fn open_rw(path: &Path, mode: FileMode) -> std::io::Result<File> {
    options(mode)
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

/// Writes `bytes` to `path` atomically: a temporary file created exclusively beside it
/// (`.NAME.tmp-PID-N`), written, synced, renamed over `path`, and the directory synced.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: FileMode) -> Result<(), FilesError> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = create_new(&tmp, mode).map_err(FilesError::io("cannot create", &tmp))?;
        f.write_all(bytes)
            .map_err(FilesError::io("cannot write", &tmp))?;
        f.sync_all().map_err(FilesError::io("cannot sync", &tmp))?;
        std::fs::rename(&tmp, path).map_err(FilesError::io("cannot rename onto", path))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
        return result;
    }
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode_of(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn files_and_dirs_are_private_whatever_the_umask_allows() {
        let base = std::env::temp_dir().join(format!("risk-files-{}", std::process::id()));
        let dir = base.join("a/b");
        create_dir(&dir, FileMode::Private).unwrap();
        assert_eq!(mode_of(&dir), 0o700);
        write_atomic(&dir.join("x"), b"data", FileMode::Private).unwrap();
        assert_eq!(mode_of(&dir.join("x")), 0o600);
        assert_eq!(std::fs::read(dir.join("x")).unwrap(), b"data");
        let f = open_append(&dir.join("g"), FileMode::Group).unwrap();
        drop(f);
        assert_eq!(mode_of(&dir.join("g")), 0o640);
        assert!(
            create_new(&dir.join("x"), FileMode::Private).is_err(),
            "exclusive"
        );
        // Nothing but x and g: the temporary file is gone.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);

        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = create_dir(&dir, FileMode::Private).unwrap_err();
        assert!(
            matches!(e, FilesError::OthersWritable { mode: 0o777, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("writable by others"), "{e}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
