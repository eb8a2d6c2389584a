//! Declares the `loom` and `rprof_tsan` cfgs so `--cfg loom` builds (scripts/pool-loom.sh) and `--cfg rprof_tsan`
//! builds (scripts/pool-sanitizers.sh) do not warn about an unknown cfg.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(loom)");
    println!("cargo::rustc-check-cfg=cfg(rprof_tsan)");
}
