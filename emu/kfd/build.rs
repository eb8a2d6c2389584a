//! Puts the emulator's C API (`rprof_emu_*`) under the `HSAKMT_1` version node, as the thunk front-end does; every
//! interposed libc/libdrm function stays an unversioned (base) definition. The SONAME lets a program linked
//! against the library (for the C API) find the preloaded copy without any library path.
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=kfd.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/kfd.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librprof_emu_kfd.so");
}
