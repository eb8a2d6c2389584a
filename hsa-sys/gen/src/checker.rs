//! Emits the layout checker from the generated bindings.
//!
//! The generated Rust modules are parsed with `syn`; every struct and union reachable from a named C type is walked
//! (anonymous members are flattened the way C++ flattens them, named members of anonymous type are walked through
//! their member path). For each one the checker emits, in the same order and with the same keys:
//! - `size K N` / `align K N` for every named type and every named member path of anonymous type,
//! - `offset K.path N` and `field_size K.path N` for every field,
//! - `bits K.path hex` for every bitfield: the object's bytes after setting only that bitfield to all ones.
//!
//! Labels are unique, so the test compares the two sides as label -> value maps. The C++ side (`layout.cpp`) computes these with `sizeof`/`alignof`/`offsetof` against the real headers, the
//! Rust side (`rust_side.rs`) with `size_of`/`align_of`/`offset_of!` and bindgen's bitfield setters. Generation
//! fails if any generated struct or union is left unvisited, so coverage is complete by construction.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use quote::ToTokens;

/// One generated module to check.
pub struct Module<'a> {
    /// Rust path of the module from the test crate, e.g. `hsa_sys::hsakmt`.
    pub rust_path: &'a str,
    /// Short key prefixed to every checked name, e.g. `hsakmt`.
    pub key: &'a str,
    /// The generated Rust source.
    pub source: &'a str,
}

/// Rust keywords bindgen suffixes with `_`; any other trailing `_` is part of the C name.
const RUST_KEYWORDS: &[&str] = &[
    "as", "async", "await", "box", "break", "const", "continue", "crate", "do", "dyn", "else",
    "enum", "extern", "false", "final", "fn", "for", "gen", "if", "impl", "in", "let", "loop",
    "macro", "match", "mod", "move", "mut", "override", "priv", "pub", "ref", "return", "self",
    "static", "struct", "super", "trait", "true", "try", "type", "typeof", "unsafe", "unsized",
    "use", "virtual", "where", "while", "yield", "abstract", "become",
];

struct Field {
    name: String,
    ty: syn::Type,
}

struct Aggregate {
    is_union: bool,
    fields: Vec<Field>,
    /// Bitfield accessor names with whether their value type is `bool`.
    bitfields: Vec<(String, bool)>,
}

fn c_name(rust_field: &str) -> &str {
    match rust_field.strip_suffix('_') {
        Some(stripped) if RUST_KEYWORDS.contains(&stripped) => stripped,
        _ => rust_field,
    }
}

fn is_layout_filler(field: &str) -> bool {
    field.starts_with("_bitfield_")
        || field.starts_with("__bindgen_padding")
        || field == "_bindgen_align"
        || field == "_address"
}

fn is_anonymous_type(name: &str) -> bool {
    name.contains("__bindgen_ty_") || name.starts_with("_bindgen_ty_")
}

fn type_name(ty: &syn::Type) -> Option<String> {
    match ty {
        syn::Type::Path(p) if p.qself.is_none() && p.path.segments.len() == 1 => {
            Some(p.path.segments[0].ident.to_string())
        }
        _ => None,
    }
}

fn collect(source: &str) -> BTreeMap<String, Aggregate> {
    let file = syn::parse_file(source).expect("generated bindings parse as Rust");
    let mut aggregates = BTreeMap::new();
    let mut accessors: BTreeMap<String, Vec<syn::ImplItemFn>> = BTreeMap::new();
    for item in &file.items {
        match item {
            syn::Item::Struct(s) if s.generics.params.is_empty() => {
                let fields = s
                    .fields
                    .iter()
                    .map(|f| Field {
                        name: f.ident.as_ref().expect("named field").to_string(),
                        ty: f.ty.clone(),
                    })
                    .collect();
                aggregates.insert(
                    s.ident.to_string(),
                    Aggregate {
                        is_union: false,
                        fields,
                        bitfields: Vec::new(),
                    },
                );
            }
            syn::Item::Union(u) if u.generics.params.is_empty() => {
                let fields = u
                    .fields
                    .named
                    .iter()
                    .map(|f| Field {
                        name: f.ident.as_ref().expect("named field").to_string(),
                        ty: f.ty.clone(),
                    })
                    .collect();
                aggregates.insert(
                    u.ident.to_string(),
                    Aggregate {
                        is_union: true,
                        fields,
                        bitfields: Vec::new(),
                    },
                );
            }
            syn::Item::Impl(i) if i.trait_.is_none() => {
                if let Some(name) = type_name(&i.self_ty) {
                    let fns = i.items.iter().filter_map(|it| match it {
                        syn::ImplItem::Fn(f) => Some(f.clone()),
                        _ => None,
                    });
                    accessors.entry(name).or_default().extend(fns);
                }
            }
            _ => {}
        }
    }
    // Incomplete C types (forward declarations) come out as `{ _unused: [u8; 0] }`: nothing to compare.
    aggregates.retain(|_, a| !(a.fields.len() == 1 && a.fields[0].name == "_unused"));
    for (name, fns) in accessors {
        let Some(aggregate) = aggregates.get_mut(&name) else {
            continue;
        };
        let setters: BTreeMap<String, bool> = fns
            .iter()
            .filter(|f| matches!(f.sig.inputs.first(), Some(syn::FnArg::Receiver(r)) if r.mutability.is_some()))
            .filter_map(|f| {
                let field = f.sig.ident.to_string().strip_prefix("set_")?.to_string();
                let syn::FnArg::Typed(val) = f.sig.inputs.iter().nth(1)? else { return None };
                Some((field, val.ty.to_token_stream().to_string() == "bool"))
            })
            .collect();
        for f in &fns {
            let getter = f.sig.ident.to_string();
            let takes_ref_self = f.sig.inputs.len() == 1
                && matches!(f.sig.inputs.first(), Some(syn::FnArg::Receiver(r)) if r.reference.is_some() && r.mutability.is_none());
            if takes_ref_self {
                if let Some(&is_bool) = setters.get(&getter) {
                    aggregate.bitfields.push((getter, is_bool));
                }
            }
        }
    }
    aggregates
}

/// Output of one module walk.
#[derive(Default)]
struct Emitted {
    cpp: String,
    rust_table: String,
    rust_bits: String,
    lines: usize,
    bit_checks: usize,
}

struct Walker<'a> {
    key: &'a str,
    aggregates: &'a BTreeMap<String, Aggregate>,
    visited: BTreeSet<String>,
    out: Emitted,
}

impl Walker<'_> {
    fn value(&mut self, label: &str, cpp_expr: &str, rust_expr: &str) {
        writeln!(self.out.cpp, "  P(\"{label}\", {cpp_expr});").unwrap();
        writeln!(self.out.rust_table, "    (\"{label}\", {rust_expr}),").unwrap();
        self.out.lines += 1;
    }

    /// Walks `ty` found at `cpp_path`/`rust_path` (empty or ending in `.`) inside the named root type.
    fn walk(
        &mut self,
        root: &str,
        ty: &str,
        cpp_path: &str,
        rust_path: &str,
        rust_offset: &str,
        through_union: bool,
    ) {
        self.visited.insert(ty.to_string());
        let aggregate = &self.aggregates[ty];
        let key = self.key;
        let union_below = through_union || aggregate.is_union;
        for field in &aggregate.fields {
            let rust_field = field.name.as_str();
            if is_layout_filler(rust_field) {
                continue;
            }
            let offset = format!("{rust_offset}::core::mem::offset_of!({ty}, {rust_field})");
            let field_ty = field.ty.to_token_stream().to_string();
            let (inner_name, element) = match &field.ty {
                syn::Type::Array(a) => (type_name(&a.elem), "[0]"),
                other => (type_name(other), ""),
            };
            let anonymous_inner = inner_name.filter(|n| is_anonymous_type(n));
            if rust_field.starts_with("__bindgen_anon_") {
                let inner = anonymous_inner.expect("anonymous member has an anonymous type");
                assert!(element.is_empty(), "array of anonymous members in {ty}");
                let rust_inner = format!("{rust_path}{rust_field}.");
                self.walk(
                    root,
                    &inner,
                    cpp_path,
                    &rust_inner,
                    &format!("{offset} + "),
                    union_below,
                );
                continue;
            }
            let cpp_member = format!("{cpp_path}{}", c_name(rust_field));
            let label = format!("{key}::{root}.{cpp_member}");
            self.value(
                &format!("offset {label}"),
                &format!("offsetof({root}, {cpp_member})"),
                &offset,
            );
            self.value(
                &format!("field_size {label}"),
                &format!("sizeof((({root}*)nullptr)->{cpp_member})"),
                &format!("::core::mem::size_of::<{field_ty}>()"),
            );
            if let Some(inner) = anonymous_inner {
                let inner_ty = self.aggregates.get(&inner).map(|_| inner.clone());
                let inner = inner_ty.unwrap_or_else(|| {
                    panic!("{ty}.{rust_field}: anonymous type {inner} not generated")
                });
                self.value(
                    &format!("align {label}"),
                    &format!("alignof(decltype((({root}*)nullptr)->{cpp_member}{element}))"),
                    &format!("::core::mem::align_of::<{inner}>()"),
                );
                let cpp_inner = format!("{cpp_member}{element}.");
                let rust_inner = format!("{rust_path}{rust_field}{element}.");
                self.walk(
                    root,
                    &inner,
                    &cpp_inner,
                    &rust_inner,
                    &format!("{offset} + "),
                    union_below,
                );
            }
        }
        for (bitfield, is_bool) in &aggregate.bitfields {
            let cpp_member = format!("{cpp_path}{}", c_name(bitfield));
            let label = format!("bits {key}::{root}.{cpp_member}");
            writeln!(
                self.out.cpp,
                "  {{ {root} v; std::memset(&v, 0, sizeof v); v.{cpp_member} = static_cast<decltype(v.{cpp_member})>(~0ull); B(\"{label}\", &v, sizeof v); }}"
            )
            .unwrap();
            let all_ones = if *is_bool { "true" } else { "!0" };
            let set = format!("(*p).{rust_path}set_{bitfield}({all_ones});");
            let (open, close) = if through_union || aggregate.is_union {
                ("// SAFETY: `p` points to a zeroed, valid value of this plain C type; the union member written\n        // through is the one the C++ side writes.\n        unsafe { ", " }")
            } else {
                ("// SAFETY: `p` points to a zeroed, valid value of this plain C type.\n        unsafe { ", " }")
            };
            writeln!(
                self.out.rust_bits,
                "    {{\n        let mut v = ::core::mem::MaybeUninit::<{root}>::zeroed();\n        let p = v.as_mut_ptr();\n        {open}{set}{close}\n        out.push(bits(\"{label}\", &v));\n    }}"
            )
            .unwrap();
            self.out.lines += 1;
            self.out.bit_checks += 1;
        }
    }
}

fn walk_module(module: &Module) -> Emitted {
    let aggregates = collect(module.source);
    let mut walker = Walker {
        key: module.key,
        aggregates: &aggregates,
        visited: BTreeSet::new(),
        out: Emitted::default(),
    };
    for name in aggregates
        .keys()
        .filter(|n| !is_anonymous_type(n) && !n.starts_with("__"))
    {
        walker.value(
            &format!("size {}::{name}", module.key),
            &format!("sizeof({name})"),
            &format!("::core::mem::size_of::<{name}>()"),
        );
        walker.value(
            &format!("align {}::{name}", module.key),
            &format!("alignof({name})"),
            &format!("::core::mem::align_of::<{name}>()"),
        );
        walker.walk(name, name, "", "", "", false);
    }
    let unvisited: Vec<_> = aggregates
        .keys()
        .filter(|n| !walker.visited.contains(*n) && !n.starts_with("__"))
        .collect();
    assert!(
        unvisited.is_empty(),
        "{}: generated types not covered by the checker: {unvisited:?}",
        module.key
    );
    walker.out
}

/// Returns `(C++ checker source, Rust side source)` for the given modules and headers.
pub fn emit<'a>(
    modules: &[Module],
    headers: impl IntoIterator<Item = &'a &'a str>,
) -> (String, String) {
    let mut cpp = String::from(
        "// @generated by hsa-sys/gen (scripts/gen-hsa-sys.sh). Do not edit by hand.\n\
         // Prints the layout of every type in hsa-sys as seen by a C++ compiler on the real headers; compared\n\
         // label by label with tests/layout/rust_side.rs by tests/layout.rs.\n",
    );
    for header in headers {
        writeln!(cpp, "#include <{header}>").unwrap();
    }
    cpp.push_str(
        "#include <cstddef>\n#include <cstdio>\n#include <cstring>\n\n\
         static void P(const char* label, std::size_t value) { std::printf(\"%s %zu\\n\", label, value); }\n\n\
         static void B(const char* label, const void* object, std::size_t size) {\n\
         \x20 std::printf(\"%s \", label);\n\
         \x20 const unsigned char* bytes = static_cast<const unsigned char*>(object);\n\
         \x20 for (std::size_t i = 0; i < size; ++i) std::printf(\"%02x\", bytes[i]);\n\
         \x20 std::printf(\"\\n\");\n}\n\nint main() {\n",
    );
    let mut rust = String::from(
        "// @generated by hsa-sys/gen (scripts/gen-hsa-sys.sh). Do not edit by hand.\n\
         //! Rust side of the layout checker: the same labels as `layout.cpp`, computed from the bindings.\n\n\
         /// Hex dump of an initialized value's bytes, in the C++ side's format.\n\
         fn bits<T>(label: &str, value: &::core::mem::MaybeUninit<T>) -> String {\n\
         \x20   // SAFETY: the value was zero-initialized as a whole and then only written through its fields, so\n\
         \x20   // all of its bytes are initialized.\n\
         \x20   let bytes = unsafe {\n\
         \x20       ::core::slice::from_raw_parts(value.as_ptr().cast::<u8>(), ::core::mem::size_of::<T>())\n\
         \x20   };\n\
         \x20   let hex: String = bytes.iter().map(|b| format!(\"{b:02x}\")).collect();\n\
         \x20   format!(\"{label} {hex}\")\n}\n\n\
         /// Every checked line (`label value`); compared with the C++ side's output as a set.\n\
         pub fn lines() -> Vec<String> {\n\
         \x20   let mut out = Vec::new();\n",
    );
    let mut modules_src = String::new();
    let mut total_lines = 0;
    let mut total_bits = 0;
    for module in modules {
        let emitted = walk_module(module);
        let m = module.key;
        cpp.push_str(&emitted.cpp);
        writeln!(
            rust,
            "    out.extend({m}_checks::TABLE.iter().map(|(label, value)| format!(\"{{label}} {{value}}\")));\n    out.extend({m}_checks::bitfields());"
        )
        .unwrap();
        write!(
            modules_src,
            "\nmod {m}_checks {{\n    #[allow(unused_imports)]\n    use super::bits;\n    use {path}::*;\n\n    \
             /// Sizes, alignments and offsets.\n    pub const TABLE: &[(&str, usize)] = &[\n{table}    ];\n\n    \
             /// Bitfield bit patterns.\n    pub fn bitfields() -> Vec<String> {{\n        #[allow(unused_mut)]\n        let mut out = Vec::new();\n{bits}        out\n    }}\n}}\n",
            path = module.rust_path,
            table = emitted.rust_table.replace("\n    (", "\n        (").replacen("    (", "        (", 1),
            bits = emitted.rust_bits,
        )
        .unwrap();
        total_lines += emitted.lines;
        total_bits += emitted.bit_checks;
    }
    cpp.push_str("  return 0;\n}\n");
    writeln!(rust, "    out\n}}\n\n/// Number of checked lines (bitfields included).\npub const LINE_COUNT: usize = {total_lines};\n\n/// Number of bitfield checks.\npub const BITFIELD_COUNT: usize = {total_bits};").unwrap();
    rust.push_str(&modules_src);
    (cpp, rust)
}
