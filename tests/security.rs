//! Security end to end (issue 16, docs/security.md), on the runtime
//! `RPROF_TEST_ROCM` selects (`tests/harness`).
//!
//! - `installed_rprof_traces_from_a_read_only_prefix`: `scripts/install.sh`
//!   into a fresh prefix (a `mktemp -d` directory under /tmp, open to
//!   everyone to traverse, so the test users reach it wherever the checkout
//!   lives) made read-only; the installed `rprof` traces a HIP
//!   program on the emulated GPU (exact dispatch counts) and writes nothing
//!   outside its output directory (the child's `TMPDIR` is empty afterwards).
//! - `planted_library_directory_is_never_loaded` and
//!   `planted_symlink_output_is_refused` run as two unprivileged users, a
//!   victim and an attacker, which the test creates with `useradd` (so they
//!   need root, as CI has; run as another user they say so and pass without
//!   checking anything). The attacker prepares the attack as in the issue; the
//!   victim runs rprof (the installed one and the build tree's); the attack
//!   must fail. `RPROF_SECURITY_RPROF=/path/to/rprof` runs the victim's side
//!   with that binary instead (with `librprof_tool.so` and `libhsakmt.so`
//!   next to it, as the old build-tree layout had them): pointed at a build of
//!   the code before this issue, both tests fail, showing the attacks worked.
//!
//! Users change with a small helper compiled here (`setpriv` is missing in
//! the 6.x roots): `dropto UID GID GROUP -- PROGRAM ARGS...`.

mod harness;

use std::ffi::OsString;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use harness::artefacts::{build, hip_program, run_checked};
use harness::outputs::{check_outputs, single_report};
use harness::run::{run_with, HIP_RUN_TIMEOUT};
use harness::{repo, target_dir, Runtime};

/// Victim and attacker accounts, and the group they share.
const VICTIM: &str = "rprof-victim";
const ATTACKER: &str = "rprof-attacker";
const GROUP: &str = "rprof-shared";

/// Where the scratch directories go: under /tmp, visible inside every
/// runtime root. Named `rprof-sec-<pid of this test binary>-<label>-XXXXXX`.
const SCRATCH_PREFIX: &str = "rprof-sec-";

/// A fresh directory under /tmp (visible inside every runtime root), made
/// with mkdtemp(1) and opened to everyone to traverse. The first call
/// removes the scratch directories of earlier runs whose process is gone:
/// the installed prefix alone is ~120 MB, read-only, and shared by the
/// tests through a static, so nothing can remove it when they end (83 of
/// them had piled up on a developer machine, 10 GB).
fn scratch(label: &str) -> PathBuf {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(remove_stale_scratch);
    let pid = std::process::id();
    let o = run_checked(
        Command::new("mktemp").args(["-d", &format!("/tmp/{SCRATCH_PREFIX}{pid}-{label}-XXXXXX")]),
        "mktemp",
    );
    let dir = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
    std::fs::set_permissions(&dir, PermissionsExt::from_mode(0o755)).unwrap();
    dir
}

/// Removes `/tmp/rprof-sec-<pid>-*` directories whose test process no
/// longer runs (made writable first: the prefix is read-only). Those of a
/// run still going (another runtime's suite in parallel) stay.
fn remove_stale_scratch() {
    let Ok(entries) = std::fs::read_dir("/tmp") else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = stale_scratch_pid(&name.to_string_lossy()) else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let path = entry.path();
        let _ = Command::new("chmod")
            .args(["-R", "u+w"])
            .arg(&path)
            .status();
        let _ = std::fs::remove_dir_all(&path);
    }
}

/// The test process of a scratch directory's name, `None` for any other name.
fn stale_scratch_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(SCRATCH_PREFIX)?;
    let (pid, label) = rest.split_once('-')?;
    if label.is_empty() {
        return None;
    }
    pid.parse().ok()
}

#[test]
fn scratch_names_carry_the_pid_of_their_test_process() {
    assert_eq!(
        stale_scratch_pid("rprof-sec-4242-prefix-AbC123"),
        Some(4242)
    );
    assert_eq!(stale_scratch_pid("rprof-sec-prefix-AbC123"), None);
    assert_eq!(stale_scratch_pid("rprof-sec-4242-"), None);
    assert_eq!(stale_scratch_pid("rprof-other-4242-x"), None);
    let dir = scratch("pid-check");
    let name = dir.file_name().unwrap().to_string_lossy().into_owned();
    assert_eq!(stale_scratch_pid(&name), Some(std::process::id()));
    std::fs::remove_dir(&dir).unwrap();
}

/// `scripts/install.sh --profile <the tests' profile> --no-build PREFIX`
/// (from the harness's build) into a fresh prefix, then everything made read-only (directories 0555, files a-w).
fn installed_prefix() -> &'static Path {
    static PREFIX: OnceLock<PathBuf> = OnceLock::new();
    PREFIX.get_or_init(|| {
        // Under /tmp (visible in every root): the checkout itself may sit in a
        // directory the test users cannot traverse (a 0700 mktemp clone).
        let prefix = scratch("prefix").join("prefix");
        let b = build();
        let mut c = Command::new("bash");
        c.arg(repo().join("scripts/install.sh"))
            .args(["--profile", &b.profile, "--no-build"])
            .arg(&prefix)
            .env("CARGO_TARGET_DIR", &b.target);
        run_checked(&mut c, "scripts/install.sh");
        run_checked(
            Command::new("chmod").args(["-R", "a-w"]).arg(&prefix),
            "chmod",
        );
        prefix
    })
}

#[test]
fn installed_rprof_traces_from_a_read_only_prefix() {
    let prefix = installed_prefix();
    let rprof = prefix.join("bin/rprof");
    for f in [
        "bin/rprof",
        "lib/rprof/librprof_tool.so",
        "lib/rprof/librprof_emu_kfd.so",
        "lib/rprof/emu/libhsakmt.so.1",
    ] {
        let m = std::fs::metadata(prefix.join(f)).unwrap();
        assert_eq!(m.mode() & 0o222, 0, "{f} is writable");
    }
    let program = hip_program("graph_storm");
    let out = scratch("installed-out");
    let tmp = scratch("installed-tmp");
    let mut cmd = Runtime::selected().command(&rprof, &[]);
    cmd.args([
        "--kernel-trace",
        "--output-format",
        "pftrace,csv,json",
        "-d",
    ])
    .arg(&out)
    .args(["-o", "run", "--device", "emulated", "--"])
    .arg(&program)
    .args(["16", "4"])
    .env("TMPDIR", &tmp)
    // Where the kfd front-end (6.4) makes its private sysfs tree.
    .env("XDG_RUNTIME_DIR", &tmp)
    .env_remove("HSA_TOOLS_LIB");
    for (k, _) in std::env::vars() {
        if k.starts_with("RPROF_") {
            cmd.env_remove(k);
        }
    }
    let run = run_with(cmd, out.clone(), HIP_RUN_TIMEOUT);
    assert!(run.status.success(), "{}\n{}", run.status, run.stderr);
    assert!(!run.stderr.contains("error"), "{}", run.stderr);
    let report = single_report(&run);
    let facts = check_outputs(&out, "run", &report);
    assert_eq!(facts.program_dispatches(), 64);
    // Nothing was made at run time outside the output directory (the kfd
    // front-end's private sysfs tree is removed at exit).
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");
    // A second run under the same name keeps the first run's files.
    let mut again = Runtime::selected().command(&rprof, &[]);
    again
        .args(["--kernel-trace", "--output-format", "csv", "-d"])
        .arg(&out)
        .args(["-o", "run", "--device", "emulated", "--"])
        .arg(&program)
        .args(["2", "1"])
        .env("TMPDIR", &tmp)
        .env_remove("HSA_TOOLS_LIB");
    let csv = out.join("run_kernel_trace.csv");
    let before = std::fs::read(&csv).unwrap();
    let run2 = run_with(again, out.clone(), HIP_RUN_TIMEOUT);
    assert!(run2.status.success(), "{}", run2.stderr);
    assert!(
        run2.stderr.contains(&format!(
            "{} already exists: rprof never overwrites a file",
            csv.display()
        )),
        "{}",
        run2.stderr
    );
    assert_eq!(std::fs::read(&csv).unwrap(), before);
    let _ = std::fs::remove_dir_all(&out);
    let _ = std::fs::remove_dir_all(&tmp);
}

/// The two accounts and the group (created once; uid/gid looked up).
struct Accounts {
    victim: (u32, u32),
    attacker: (u32, u32),
    group: u32,
    dropto: PathBuf,
}

fn id_of(flag: &str, name: &str) -> u32 {
    let o = run_checked(Command::new("id").args([flag, name]), "id");
    String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
}

/// The two users and their group, made on first use. Only root can make
/// them: elsewhere the two-user tests fail with that reason (CI runs them as
/// root), never pass without checking anything.
fn accounts() -> &'static Accounts {
    static ACCOUNTS: OnceLock<Accounts> = OnceLock::new();
    ACCOUNTS
        .get_or_init(|| {
            // SAFETY: geteuid has no preconditions.
            let euid = unsafe { libc::geteuid() };
            assert!(
                euid == 0,
                "the two-user attack tests must run as root, to create the users {VICTIM} and {ATTACKER} \
                 (CI runs them as root)"
            );
            if Command::new("getent").args(["group", GROUP]).output().map(|o| !o.status.success()).unwrap_or(true) {
                run_checked(Command::new("groupadd").arg(GROUP), "groupadd");
            }
            for user in [VICTIM, ATTACKER] {
                let exists = Command::new("id").arg(user).output().map(|o| o.status.success()).unwrap_or(false);
                if !exists {
                    run_checked(
                        Command::new("useradd").args(["--no-create-home", "--shell", "/bin/sh", "-G", GROUP, user]),
                        "useradd",
                    );
                }
            }
            let dir = Runtime::selected().build_dir(&target_dir(), "security");
            let src = dir.join("dropto.c");
            std::fs::write(
                &src,
                "#include <grp.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <unistd.h>\n\
                 int main(int c, char **v) {\n\
                   if (c < 6) return 111;\n\
                   gid_t g[1] = {(gid_t)atoi(v[3])};\n\
                   if (setgroups(1, g) || setgid(atoi(v[2])) || setuid(atoi(v[1]))) { perror(\"dropto\"); return 111; }\n\
                   execvp(v[5], v + 5); perror(v[5]); return 127;\n}\n",
            )
            .unwrap();
            let dropto = dir.join("dropto");
            run_checked(Command::new("gcc").arg("-O").arg(&src).arg("-o").arg(&dropto), "gcc dropto");
            Accounts {
                victim: (id_of("-u", VICTIM), id_of("-g", VICTIM)),
                attacker: (id_of("-u", ATTACKER), id_of("-g", ATTACKER)),
                group: id_of_group(),
                dropto,
            }
        })
}

fn id_of_group() -> u32 {
    let o = run_checked(Command::new("getent").args(["group", GROUP]), "getent");
    String::from_utf8_lossy(&o.stdout)
        .split(':')
        .nth(2)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Runs `program args` on the selected runtime as `who` (uid, gid).
fn as_user(acc: &Accounts, who: (u32, u32), program: &Path, args: &[OsString]) -> Command {
    let mut c = Runtime::selected().command(&acc.dropto, &[]);
    c.arg(who.0.to_string())
        .arg(who.1.to_string())
        .arg(acc.group.to_string())
        .arg("--")
        .arg(program)
        .args(args)
        .env("TMPDIR", "/tmp")
        .env_remove("HSA_TOOLS_LIB");
    for (k, _) in std::env::vars() {
        if k.starts_with("RPROF_") {
            c.env_remove(k);
        }
    }
    c
}

/// The rprof binaries the victim runs: the installed one and the build
/// tree's, or `RPROF_SECURITY_RPROF` alone.
fn victim_rprofs() -> Vec<PathBuf> {
    match std::env::var_os("RPROF_SECURITY_RPROF") {
        Some(p) => vec![PathBuf::from(p)],
        None => vec![
            installed_prefix().join("bin/rprof"),
            build_tree_copy().join("rprof"),
        ],
    }
}

/// The build tree's layout (`rprof` with its libraries next to it) copied into
/// a directory under /tmp that the test users can reach: the checkout's own
/// target directory may not be traversable by them.
fn build_tree_copy() -> &'static Path {
    static COPY: OnceLock<PathBuf> = OnceLock::new();
    COPY.get_or_init(|| {
        let dir = scratch("build-tree");
        let built = build().rprof.clone();
        let from = built.parent().expect("rprof in a directory");
        for name in [
            "rprof",
            "librprof_tool.so",
            "libhsakmt.so",
            "librprof_emu_kfd.so",
        ] {
            std::fs::copy(from.join(name), dir.join(name))
                .unwrap_or_else(|e| panic!("copy {name} from {}: {e}", from.display()));
        }
        dir
    })
}

#[test]
fn planted_library_directory_is_never_loaded() {
    let acc = accounts();
    let lab = scratch("planted-lib");
    let marker_dir = lab.join("markers");
    std::fs::create_dir(&marker_dir).unwrap();
    std::fs::set_permissions(&marker_dir, PermissionsExt::from_mode(0o777)).unwrap();
    // The attacker's library: a filter of the real libselinux.so.1 (which
    // /usr/bin/id needs), whose constructor records who ran it.
    let evil_src = lab.join("evil.c");
    std::fs::write(
        &evil_src,
        format!(
            "#include <stdio.h>\n#include <unistd.h>\n\
             __attribute__((constructor)) static void pwn(void) {{\n\
               char p[512]; snprintf(p, sizeof p, \"{}/ran-as-%u\", (unsigned)getuid());\n\
               FILE *f = fopen(p, \"w\"); if (f) fclose(f);\n}}\n",
            marker_dir.display()
        ),
    )
    .unwrap();
    let evil = lab.join("libselinux.so.1");
    run_checked(
        Command::new("gcc")
            .args(["-shared", "-fPIC", "-Wl,-soname,libselinux.so.1"])
            .arg("-Wl,--filter=/lib/x86_64-linux-gnu/libselinux.so.1")
            .arg(&evil_src)
            .arg("-o")
            .arg(&evil),
        "gcc evil library",
    );
    std::fs::set_permissions(&evil, PermissionsExt::from_mode(0o755)).unwrap();
    // The attacker pre-creates the directory rprof used to link into.
    let planted = PathBuf::from(format!("/tmp/rprof-emu-{}", acc.victim.0));
    let _ = std::fs::remove_dir_all(&planted);
    let sh = Path::new("/bin/sh");
    run_checked(
        &mut as_user(
            acc,
            acc.attacker,
            sh,
            &[
                "-c".into(),
                format!(
                    "mkdir -m 777 {p} && chmod 777 {p} && cp {e} {p}/ && chmod 777 {p}/libselinux.so.1",
                    p = planted.display(),
                    e = evil.display()
                )
                .into(),
            ],
        ),
        "attacker plants the library",
    );
    for rprof in victim_rprofs() {
        let o = as_user(
            acc,
            acc.victim,
            &rprof,
            &[
                "--device".into(),
                "emulated".into(),
                "--".into(),
                "/usr/bin/id".into(),
                "-u".into(),
            ],
        )
        .output()
        .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        assert!(
            o.status.success(),
            "{}: {}\n{stderr}",
            rprof.display(),
            o.status
        );
        assert_eq!(stdout.trim(), acc.victim.0.to_string(), "{stderr}");
        let ran: Vec<_> = std::fs::read_dir(&marker_dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(
            ran.is_empty(),
            "{}: the attacker's library ran in the victim's app: {ran:?}\n{stderr}",
            rprof.display()
        );
        assert!(
            !stderr.contains("cannot set up the emulated GPU"),
            "{stderr}"
        );
        // The build tree's private directory is gone with the app; nothing
        // else of the victim's was left in /tmp under rprof's name.
        let left: Vec<_> = std::fs::read_dir("/tmp")
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("rprof-emu-"))
            .filter(|e| e.path() != planted)
            .filter(|e| std::fs::symlink_metadata(e.path()).is_ok_and(|m| m.uid() == acc.victim.0))
            .map(|e| e.path())
            .collect();
        assert!(
            left.is_empty(),
            "{}: left behind: {left:?}",
            rprof.display()
        );
    }
    let _ = std::fs::remove_dir_all(&planted);
    let _ = std::fs::remove_dir_all(&lab);
}

#[test]
fn planted_symlink_output_is_refused() {
    let acc = accounts();
    let lab = scratch("planted-link");
    // The victim's private file, in a directory only the victim can enter.
    let home = lab.join("victim-home");
    std::fs::create_dir(&home).unwrap();
    let precious = home.join("precious");
    std::fs::write(&precious, b"the victim's data\n").unwrap();
    for p in [&home, &precious] {
        std::os::unix::fs::chown(p, Some(acc.victim.0), Some(acc.victim.1)).unwrap();
    }
    std::fs::set_permissions(&home, PermissionsExt::from_mode(0o700)).unwrap();
    std::fs::set_permissions(&precious, PermissionsExt::from_mode(0o600)).unwrap();
    let sh = Path::new("/bin/sh");
    // A copy the victim can reach (the checkout's target directory may not be).
    let program = lab.join("graph_storm");
    std::fs::copy(hip_program("graph_storm"), &program).unwrap();
    std::fs::set_permissions(&program, PermissionsExt::from_mode(0o755)).unwrap();
    for (i, rprof) in victim_rprofs().iter().enumerate() {
        // A project directory both users may write (setgid group, no sticky
        // bit, as shared scratch directories are).
        let shared = lab.join(format!("shared{i}"));
        std::fs::create_dir(&shared).unwrap();
        std::os::unix::fs::chown(&shared, Some(0), Some(acc.group)).unwrap();
        std::fs::set_permissions(&shared, PermissionsExt::from_mode(0o2770)).unwrap();
        let link = shared.join("run_kernel_trace.csv");
        run_checked(
            &mut as_user(
                acc,
                acc.attacker,
                sh,
                &[
                    "-c".into(),
                    format!("ln -s {} {}", precious.display(), link.display()).into(),
                ],
            ),
            "attacker plants the symlink",
        );
        let o = as_user(
            acc,
            acc.victim,
            rprof,
            &[
                "--kernel-trace".into(),
                "--output-format".into(),
                "csv".into(),
                "-d".into(),
                shared.clone().into(),
                "-o".into(),
                "run".into(),
                "--device".into(),
                "emulated".into(),
                "--".into(),
                program.clone().into(),
                "2".into(),
                "1".into(),
            ],
        )
        .output()
        .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            String::from_utf8_lossy(&std::fs::read(&precious).unwrap()),
            "the victim's data\n",
            "{}: the victim's file was written through the planted link\n{stderr}",
            rprof.display()
        );
        assert!(
            stderr.contains(&format!(
                "{} is a symbolic link: rprof never writes through one",
                link.display()
            )),
            "{}: {stderr}",
            rprof.display()
        );
        assert!(
            o.status.success(),
            "{}: {}\n{stderr}",
            rprof.display(),
            o.status
        );
    }
    let _ = std::fs::remove_dir_all(&lab);
}
