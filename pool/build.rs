//! Declares the `loom` cfg so `--cfg loom` builds (scripts/pool-loom.sh) do not warn about an unknown cfg.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(loom)");
}
