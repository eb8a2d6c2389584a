//! How every file rprof writes is created: one mechanism for the outputs, the
//! statistics, `rprof merge` and the spool files.
//!
//! [`create_new`] opens with `O_CREAT | O_EXCL | O_NOFOLLOW`: an existing
//! file is never overwritten (an earlier run's trace stays as it was) and a
//! symbolic link planted where an output should go is never followed (a
//! shared output directory cannot be used to truncate another user's file).
//! Either case is an error naming the file and saying how to pick another
//! name. The directory is the user's choice and is used as given (a shared
//! group directory works; whoever may write it can also rename what rprof
//! wrote there, which no open flag prevents). [`spool_file`] gives a nameless file for temporary
//! data (`O_TMPFILE`), or, where the file system lacks that, a create-new file
//! unlinked at once.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// What to do about an output name that is taken, for messages.
const CHOOSE_ANOTHER: &str =
    "remove it, or choose another name with -o/--output-file (RPROF_OUTPUT_NAME) or \
                              another directory with -d/--output-directory (RPROF_OUTPUT_DIR)";

/// Creates the trace output `path` for writing, which must not exist (see
/// the module doc); the error says how to pick another output name.
pub fn create_new(path: &Path) -> io::Result<File> {
    create_new_hinted(path, CHOOSE_ANOTHER)
}

/// Like [`create_new`], with `hint` (what to do instead) in the error.
pub fn create_new_hinted(path: &Path, hint: &str) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .mode(0o666)
        .open(path)
        .map_err(|e| explain(path, e, hint))
}

/// The error for a failed [`create_new`] of `path`, naming it.
fn explain(path: &Path, e: io::Error, hint: &str) -> io::Error {
    let is_link = std::fs::symlink_metadata(path)
        .map(|m| m.file_type().is_symlink())
        .unwrap_or(false);
    match e.raw_os_error() {
        Some(libc::EEXIST) | Some(libc::ELOOP) if is_link => io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} is a symbolic link: rprof never writes through one ({hint})",
                path.display()
            ),
        ),
        Some(libc::EEXIST) => io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} already exists: rprof never overwrites a file ({hint})",
                path.display()
            ),
        ),
        _ => io::Error::new(e.kind(), format!("cannot create {}: {e}", path.display())),
    }
}

/// A private, nameless read-write file in `dir` for data spooled until the
/// end of the run (gone when closed).
pub fn spool_file(dir: &Path) -> io::Result<File> {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    match OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .mode(0o600)
        .open(dir)
    {
        Ok(f) => Ok(f),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EOPNOTSUPP) | Some(libc::EISDIR) | Some(libc::EINVAL)
            ) =>
        {
            // No O_TMPFILE here: a fresh name, created new and unlinked.
            let name = dir.join(format!(
                ".rprof-spool-{}-{:x}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0)
            ));
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .mode(0o600)
                .open(&name)
                .map_err(|e| explain(&name, e, "a spool file's name was taken"))?;
            std::fs::remove_file(&name)?;
            Ok(f)
        }
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("cannot create a spool file in {}: {e}", dir.display()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};

    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("rprof-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn an_existing_file_is_kept_and_named() {
        let d = scratch("exists");
        let p = d.join("run.pftrace");
        std::fs::write(&p, b"earlier run").unwrap();
        let e = create_new(&p).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!("{} already exists", p.display())),
            "{msg}"
        );
        assert!(msg.contains("-o/--output-file"), "{msg}");
        assert_eq!(std::fs::read(&p).unwrap(), b"earlier run");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_planted_symlink_is_not_followed() {
        let d = scratch("symlink");
        let victim = d.join("victim.txt");
        std::fs::write(&victim, b"precious").unwrap();
        let p = d.join("run.csv");
        std::os::unix::fs::symlink(&victim, &p).unwrap();
        let msg = create_new(&p).unwrap_err().to_string();
        assert!(
            msg.starts_with(&format!("{} is a symbolic link", p.display())),
            "{msg}"
        );
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        // A dangling link is not followed either (it would create the target).
        let p2 = d.join("run2.csv");
        std::os::unix::fs::symlink(d.join("created-through-link"), &p2).unwrap();
        assert!(create_new(&p2).is_err());
        assert!(!d.join("created-through-link").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_new_name_is_created() {
        let d = scratch("new");
        let p = d.join("new.csv");
        create_new(&p).unwrap().write_all(b"x").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"x");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn spool_files_have_no_name() {
        let d = scratch("spool");
        let mut f = spool_file(&d).unwrap();
        f.write_all(b"spooled").unwrap();
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
        f.rewind().unwrap();
        let mut s = String::new();
        f.read_to_string(&mut s).unwrap();
        assert_eq!(s, "spooled");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
