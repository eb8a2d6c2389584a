//! Runs ordinary programs (`sh`, `cat`, `ls`, `python3`) with `librprof_emu_kfd.so` preloaded and checks what the
//! emulated driver answers: the sysfs tree (and that it disappears at exit), KFD ioctls and mmaps on `/dev/kfd`
//! and a render node, events with ages, pass-through of everything else, and a refused configuration.
use std::path::PathBuf;
use std::process::{Command, Output};

fn library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let lib = dir.join("librprof_emu_kfd.so");
    let built = std::fs::metadata(&lib)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| panic!("{} not built: cargo build -p rprof-emu-kfd", lib.display()));
    // Cargo does not rebuild a cdylib-only crate for its integration tests: refuse a stale library.
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in [src.join("src"), src.join("../src")] {
        for e in std::fs::read_dir(&dir).unwrap() {
            let m = e.unwrap().metadata().unwrap().modified().unwrap();
            assert!(
                m <= built,
                "{} is older than its sources: cargo build -p rprof-emu-kfd",
                lib.display()
            );
        }
    }
    lib
}

fn fresh_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rprof-kfd-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(cmd: &mut Command, runtime_dir: &PathBuf, env: &[(&str, &str)]) -> Output {
    cmd.env("LD_PRELOAD", library())
        .env("XDG_RUNTIME_DIR", runtime_dir);
    for (k, _) in std::env::vars() {
        if k.starts_with("RPROF_EMU_") {
            cmd.env_remove(k);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn sysfs_topology_is_served_then_removed() {
    let rt = fresh_dir("sysfs");
    let out = run(
        Command::new("sh").arg("-c").arg(
            "grep -E '^(gfx_target_version|simd_per_cu|fw_version|drm_render_minor) ' \
             /sys/devices/virtual/kfd/kfd/topology/nodes/1/properties \
             /sys/class/kfd/kfd/topology/nodes/2/properties; \
             ls /sys/class/kfd/kfd/topology/nodes; cat /sys/module/amdgpu/initstate; \
             cat /sys/devices/virtual/kfd/kfd/topology/nodes/2/gpu_id; \
             test -e /sys/class/kfd/kfd/topology/nodes/3 || echo no-node-3; \
             grep '^amdgpu ' /proc/modules | cut -d' ' -f1",
        ),
        &rt,
        &[("RPROF_EMU_GPUS", "gfx942,gfx1100")],
    );
    assert!(out.status.success(), "{out:?}");
    let expected = "/sys/devices/virtual/kfd/kfd/topology/nodes/1/properties:simd_per_cu 4\n\
                    /sys/devices/virtual/kfd/kfd/topology/nodes/1/properties:gfx_target_version 90402\n\
                    /sys/devices/virtual/kfd/kfd/topology/nodes/1/properties:drm_render_minor 128\n\
                    /sys/devices/virtual/kfd/kfd/topology/nodes/1/properties:fw_version 170\n\
                    /sys/class/kfd/kfd/topology/nodes/2/properties:simd_per_cu 2\n\
                    /sys/class/kfd/kfd/topology/nodes/2/properties:gfx_target_version 110000\n\
                    /sys/class/kfd/kfd/topology/nodes/2/properties:drm_render_minor 129\n\
                    /sys/class/kfd/kfd/topology/nodes/2/properties:fw_version 800\n\
                    0\n1\n2\nlive\n19970\nno-node-3\namdgpu\n";
    assert_eq!(text(&out), expected);
    // `cat`, `ls`, `grep` removed their private trees at exit; the shell (its `test` builtin stats a node) ends with
    // `_exit`, which runs no exit handler, so its tree is left...
    let left: Vec<_> = std::fs::read_dir(&rt)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 1, "{left:?}");
    // ...until the next process that creates a tree there removes it.
    let out = run(
        Command::new("cat").arg("/sys/module/amdgpu/initstate"),
        &rt,
        &[],
    );
    assert_eq!(text(&out), "live\n");
    assert_eq!(std::fs::read_dir(&rt).unwrap().count(), 0);
    std::fs::remove_dir_all(&rt).unwrap();
}

const PY: &str = r#"
import os, fcntl, struct, mmap, ctypes
kfd = os.open('/dev/kfd', os.O_RDWR)
b = bytearray(8); fcntl.ioctl(kfd, 0x80084b01, b); print('version=%d.%d' % struct.unpack('II', b))
# Apertures of the one GPU (the array has room for both nodes).
arr = ctypes.create_string_buffer(56 * 2)
a = bytearray(struct.pack('QII', ctypes.addressof(arr), 2, 0)); fcntl.ioctl(kfd, 0xc0104b14, a)
n = struct.unpack('QII', a)[1]
lds, _, scratch, _, vm_base, vm_limit, gpu = struct.unpack_from('QQQQQQI', arr.raw, 0)
print('apertures=%d gpu_id=%d lds_hi=%#x vm_limit=%#x' % (n, gpu, lds >> 32, vm_limit))
render = os.open('/dev/dri/renderD128', os.O_RDWR)
fcntl.ioctl(kfd, 0x40084b15, bytearray(struct.pack('II', render, gpu)))
# A GTT BO, mapped through the render fd at the offset KFD chose.
al = bytearray(struct.pack('QQQQII', 0, 8192, 0, 0, gpu, (1 << 1) | (1 << 31))); fcntl.ioctl(kfd, 0xc0284b16, al)
_, _, handle, offset, _, _ = struct.unpack('QQQQII', al)
print('handle_gpu=%d' % (handle >> 32))
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
p = libc.mmap(None, 8192, 3, 1, render, offset)
ctypes.memset(p, 0x5a, 8192); print('bo_byte=%#x' % ctypes.c_ubyte.from_address(p + 8191).value)
# A signal event on that page: the first CREATE_EVENT hands the page over (filled with 0xFF).
ce = bytearray(struct.pack('QIIIIII', handle, 0, 0, 1, 0, 0, 0)); fcntl.ioctl(kfd, 0xc0204b08, ce)
_, trig, _, _, _, eid, slot = struct.unpack('QIIIIII', ce)
print('event_id=%d slot=%d page_word=%#x' % (eid, slot, ctypes.c_uint64.from_address(p).value))
# Event ages: fired once -> age 2; a wait that last saw age 1 returns at once with the new age.
fcntl.ioctl(kfd, 0x40084b0a, bytearray(struct.pack('II', eid, 0)))
ev = ctypes.create_string_buffer(struct.pack('QQQQQII', 1, 0, 0, 0, 0, eid, 0), 48)
w = bytearray(struct.pack('QIIII', ctypes.addressof(ev), 1, 0, 0, 7)); fcntl.ioctl(kfd, 0xc0184b0c, w)
print('wait_result=%d age=%d' % (struct.unpack('QIIII', w)[4], struct.unpack_from('Q', ev.raw, 0)[0]))
w = bytearray(struct.pack('QIIII', ctypes.addressof(ev), 1, 0, 1, 7)); fcntl.ioctl(kfd, 0xc0184b0c, w)
print('second_wait_result=%d' % struct.unpack('QIIII', w)[4])
fcntl.ioctl(kfd, 0x40084b17, bytearray(struct.pack('Q', handle)))
try:
    fcntl.ioctl(kfd, 0x40084b17, bytearray(struct.pack('Q', handle)))
except OSError as e:
    print('double_free_errno=%d' % e.errno)
# Pass-through: an ioctl on a pipe still reaches the kernel.
r, wr = os.pipe(); os.write(wr, b'abc'); q = bytearray(4); fcntl.ioctl(r, 0x541B, q)
print('fionread=%d' % struct.unpack('i', q)[0])
os.close(render); os.close(kfd)
"#;

#[test]
fn kfd_ioctls_mmaps_and_events_answer_like_kfd() {
    let rt = fresh_dir("ioctl");
    let out = run(Command::new("python3").arg("-c").arg(PY), &rt, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        text(&out),
        "version=1.14\n\
         apertures=1 gpu_id=19969 lds_hi=0x10000 vm_limit=0x7fffffffffff\n\
         handle_gpu=19969\n\
         bo_byte=0x5a\n\
         event_id=1 slot=1 page_word=0xffffffffffffffff\n\
         wait_result=0 age=2\n\
         second_wait_result=1\n\
         double_free_errno=22\n\
         fionread=3\n"
    );
    std::fs::remove_dir_all(&rt).unwrap();
}

#[test]
fn a_bad_configuration_hides_the_device_and_says_why() {
    let rt = fresh_dir("badcfg");
    let out = run(
        Command::new("python3").arg("-c").arg(
            "import os\ntry:\n    os.open('/dev/kfd', os.O_RDWR)\nexcept OSError as e:\n    print('errno=%d' % e.errno)\n\
             print(os.path.exists('/sys/class/kfd/kfd/topology/nodes'))",
        ),
        &rt,
        &[("RPROF_EMU_GPUS", "gfx4242")],
    );
    assert_eq!(text(&out), "errno=2\nFalse\n");
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("rprof-emu: bad configuration: GPUS: unknown ISA 'gfx4242'"));
    std::fs::remove_dir_all(&rt).unwrap();
}
