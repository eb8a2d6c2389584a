//! Gives the cdylib the SONAME ROCr links against and the `HSAKMT_1` version node its imports name.
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=hsakmt.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libhsakmt.so.1");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/hsakmt.map");
}
