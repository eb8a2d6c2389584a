//! Puts the emulator's C API (`rprof_emu_*`) under the `HSAKMT_1` version node, as the thunk front-end does; every
//! interposed libc/libdrm function stays an unversioned (base) definition.
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=kfd.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/kfd.map");
}
