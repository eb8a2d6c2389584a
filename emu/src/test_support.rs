//! Helpers for tests that run real programs over the emulator.
//!
//! ROCr finds the emulator through `LD_LIBRARY_PATH`: [`library_dir`] returns a directory holding
//! `libhsakmt.so.1 → <target dir>/…/libhsakmt.so`, creating it on first use.

use std::path::{Path, PathBuf};

/// Finds the cdylib `libhsakmt.so` next to (or one level above) the running test executable.
pub fn find_cdylib() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let mut dir = exe.parent()?.to_path_buf();
    for _ in 0..3 {
        let candidate = dir.join("libhsakmt.so");
        if candidate.exists() {
            return Some(candidate);
        }
        dir = dir.parent()?.to_path_buf();
    }
    None
}

/// Target directory of the current build (`…/target/<profile>`), derived from the test executable's location.
pub fn profile_dir() -> Option<PathBuf> {
    find_cdylib().and_then(|p| p.parent().map(Path::to_path_buf))
}

/// Creates (idempotently) `<profile dir>/emu-lib/libhsakmt.so.1 → libhsakmt.so` and returns the directory to put on
/// `LD_LIBRARY_PATH`.
pub fn library_dir() -> std::io::Result<PathBuf> {
    let lib = find_cdylib().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "libhsakmt.so not built next to the test executable",
        )
    })?;
    let dir = lib
        .parent()
        .map(|p| p.join("emu-lib"))
        .unwrap_or_else(|| PathBuf::from("emu-lib"));
    std::fs::create_dir_all(&dir)?;
    let link = dir.join("libhsakmt.so.1");
    let tmp = dir.join(format!("libhsakmt.so.1.tmp{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&lib, &tmp)?;
    std::fs::rename(&tmp, &link)?;
    Ok(dir)
}
