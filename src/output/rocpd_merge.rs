//! `rprof merge a_results.db b_results.db -o all.db`: several rocpd databases
//! (one per process or rank) copied into one.
//!
//! Owns reading the input databases and writing the merged one; it must not
//! change the inputs (they are ATTACHed read-only) and knows no table by
//! name beyond `rocpd_metadata`: whatever tables and views the writer
//! ([`super::rocpd`]) creates are carried over.
//!
//! Every input's tables already carry its own UUID suffix and every row its
//! GUID, so the merged database simply holds each input's table set under
//! its own names (with its DDL, constraints included). The unsuffixed alias
//! views (`rocpd_kernel_dispatch`, ...) become `UNION ALL`s over the inputs'
//! tables, and the data views (`kernels`, `top_kernels`, ...) are re-created
//! from the first input's definitions: they join on `(id, guid)`, so rows of
//! different processes never meet, and `select pid, count(*) from kernels
//! group by pid` answers per process. This is the layout AMD's rocpd tools
//! build in memory over several databases.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use rusqlite::Connection;

/// What a merge did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MergeSummary {
    /// Databases merged.
    pub databases: usize,
    /// Tables copied (all inputs).
    pub tables: usize,
    /// Rows copied (all inputs).
    pub rows: u64,
}

fn to_io(e: rusqlite::Error) -> io::Error {
    io::Error::other(e)
}

/// Whether `path` starts like an SQLite database (its 16-byte header).
pub fn is_sqlite(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 16];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok()
        && &head == b"SQLite format 3\0"
}

/// One input: its table suffix (from its `rocpd_metadata`), tables and
/// views in creation order.
struct Input {
    suffix: String,
    /// `(name, sql)` of the suffixed tables.
    tables: Vec<(String, String)>,
    /// `(name, sql)` of the views.
    views: Vec<(String, String)>,
}

fn read_input(db: &Connection, schema: &str, path: &Path) -> io::Result<Input> {
    let bad = |why: String| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {why}", path.display()),
        )
    };
    let mut st = db
        .prepare(&format!(
            "SELECT type, name, sql FROM {schema}.sqlite_master \
             WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
        ))
        .map_err(to_io)?;
    let objects: Vec<(String, String, String)> = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .map_err(to_io)?
        .collect::<Result<_, _>>()
        .map_err(to_io)?;
    let metadata = objects
        .iter()
        .find(|(t, n, _)| t == "table" && n.starts_with("rocpd_metadata_"))
        .ok_or_else(|| bad("not a rocpd database (no rocpd_metadata table)".into()))?;
    let suffix = metadata.1["rocpd_metadata".len()..].to_string();
    let version: String = db
        .query_row(
            &format!(
                "SELECT value FROM {schema}.\"{}\" WHERE tag = 'schema_version'",
                metadata.1
            ),
            [],
            |r| r.get(0),
        )
        .map_err(|e| bad(format!("no schema_version: {e}")))?;
    if version != "3" {
        return Err(bad(format!(
            "rocpd schema version {version}; rprof merges version 3"
        )));
    }
    let mut input = Input {
        suffix,
        tables: Vec::new(),
        views: Vec::new(),
    };
    for (kind, name, sql) in objects {
        if kind == "table" {
            if !name.ends_with(&input.suffix) {
                return Err(bad(format!(
                    "table {name} lacks the database's suffix {}",
                    input.suffix
                )));
            }
            input.tables.push((name, sql));
        } else {
            input.views.push((name, sql));
        }
    }
    Ok(input)
}

/// Merges the rocpd databases `inputs` into the new database `output`,
/// which `create` makes (exclusively: an existing file is never
/// overwritten). Inputs must be rocpd schema version 3 and distinct (two
/// copies of one database share a suffix and are refused).
pub fn merge_databases(
    inputs: &[&Path],
    output: &Path,
    create: impl Fn(&Path) -> io::Result<std::fs::File>,
) -> io::Result<MergeSummary> {
    if inputs.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no database to merge",
        ));
    }
    for p in inputs {
        if !is_sqlite(p) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} is not an SQLite database", p.display()),
            ));
        }
    }
    drop(create(output)?);
    let result = merge_into(inputs, output);
    if result.is_err() {
        let _ = std::fs::remove_file(output);
    }
    result
}

fn merge_into(inputs: &[&Path], output: &Path) -> io::Result<MergeSummary> {
    let db = Connection::open(output).map_err(to_io)?;
    // Rows are copied table by table, parents not necessarily first.
    db.execute_batch("PRAGMA foreign_keys = OFF; PRAGMA synchronous = OFF;")
        .map_err(to_io)?;
    let mut summary = MergeSummary {
        databases: inputs.len(),
        ..Default::default()
    };
    let mut read = Vec::new();
    let mut seen_suffix: BTreeMap<String, &Path> = BTreeMap::new();
    for (i, path) in inputs.iter().enumerate() {
        let schema = format!("in{i}");
        let uri = format!(
            "file:{}?mode=ro",
            path.to_string_lossy()
                .replace('?', "%3f")
                .replace('#', "%23")
        );
        db.execute("ATTACH DATABASE ?1 AS ?2", rusqlite::params![uri, schema])
            .map_err(to_io)?;
        let input = read_input(&db, &schema, path)?;
        if let Some(first) = seen_suffix.insert(input.suffix.clone(), path) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} and {} are the same database (table suffix {})",
                    first.display(),
                    path.display(),
                    input.suffix
                ),
            ));
        }
        read.push((schema, input));
    }
    db.execute_batch("BEGIN").map_err(to_io)?;
    // Base name (suffix removed) -> the suffixed tables of every input.
    let mut bases: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut base_order: Vec<String> = Vec::new();
    for (schema, input) in &read {
        for (name, sql) in &input.tables {
            db.execute_batch(sql).map_err(to_io)?;
            let n = db
                .execute(
                    &format!("INSERT INTO main.\"{name}\" SELECT * FROM {schema}.\"{name}\""),
                    [],
                )
                .map_err(to_io)?;
            summary.tables += 1;
            summary.rows += n as u64;
            let base = name[..name.len() - input.suffix.len()].to_string();
            if !bases.contains_key(&base) {
                base_order.push(base.clone());
            }
            bases.entry(base).or_default().push(name.clone());
        }
    }
    for base in &base_order {
        let union = bases[base]
            .iter()
            .map(|t| format!("SELECT * FROM \"{t}\""))
            .collect::<Vec<_>>()
            .join(" UNION ALL ");
        db.execute_batch(&format!("CREATE VIEW \"{base}\" AS {union};"))
            .map_err(to_io)?;
    }
    // The data views, as the first input defines them (alias views are
    // the unions above).
    for (name, sql) in &read[0].1.views {
        if !bases.contains_key(name) {
            db.execute_batch(sql).map_err(to_io)?;
        }
    }
    db.execute_batch("COMMIT").map_err(to_io)?;
    for (schema, _) in &read {
        db.execute("DETACH DATABASE ?1", [schema]).map_err(to_io)?;
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::rocpd::RocpdSink;
    use crate::record::{AgentInfo, DispatchRecord, RunInfo, RunMetadata};
    use crate::sink::{KernelInfo, RecordSink};

    fn write_db(path: &Path, pid: u32, alpha: u64, beta: u64) {
        let mut sink = RocpdSink::create(path).unwrap();
        sink.start(
            &RunInfo {
                pid,
                process_name: "app".into(),
                cmdline: vec!["./app".into()],
                hostname: "host".into(),
                start_ns: 1_000,
                ..Default::default()
            },
            &[AgentInfo {
                index: 0,
                name: "gfx90a".into(),
                product_name: "Emulated MI210".into(),
                handle: 0x1000,
                compute_units: 104,
                cpu: false,
            }],
        )
        .unwrap();
        let kernels = [
            KernelInfo {
                kernel_id: 1,
                display_name: "alpha",
                symbol_name: "alpha",
                resources: None,
            },
            KernelInfo {
                kernel_id: 2,
                display_name: "beta",
                symbol_name: "beta",
                resources: None,
            },
        ];
        for n in 1..=alpha + beta {
            let k = usize::from(n > alpha);
            let rec = DispatchRecord {
                correlation_id: (u64::from(pid) << 32) + n,
                dispatch_id: n,
                agent_index: 0,
                queue_id: 7,
                thread_id: pid,
                kernel_object: 0xa000 + k as u64,
                grid: [64, 1, 1],
                workgroup: [64, 1, 1],
                private_segment_size: 0,
                group_segment_size: 0,
                enqueue_ns: 1_000 + n,
                start_ns: 2_000 + 10 * n,
                end_ns: 2_005 + 10 * n,
            };
            sink.dispatch(&rec, &kernels[k]).unwrap();
        }
        sink.finish(&RunMetadata {
            end_ns: 9_000,
            ..Default::default()
        })
        .unwrap();
    }

    fn dir(name: &str) -> std::path::PathBuf {
        let d =
            std::env::temp_dir().join(format!("rprof-rocpd-merge-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn create(p: &Path) -> io::Result<std::fs::File> {
        crate::output::files::create_new(p)
    }

    #[test]
    fn merged_views_answer_per_process_with_every_input_row() {
        let d = dir("two");
        let (a, b, out) = (d.join("a.db"), d.join("b.db"), d.join("all.db"));
        write_db(&a, 100, 3, 2);
        write_db(&b, 200, 4, 0);
        let s = merge_databases(&[&a, &b], &out, create).unwrap();
        assert_eq!(s.databases, 2);
        let db = Connection::open(&out).unwrap();
        let one = |sql: &str| -> i64 { db.query_row(sql, [], |r| r.get(0)).unwrap() };
        assert_eq!(one("select count(*) from kernels"), 9);
        assert_eq!(one("select count(*) from rocpd_kernel_dispatch"), 9);
        assert_eq!(one("select count(*) from processes"), 2);
        assert_eq!(one("select count(*) from kernels where name = 'alpha'"), 7);
        assert_eq!(
            one("select total_calls from top_kernels where name = 'beta'"),
            2
        );
        let mut st = db
            .prepare("select pid, count(*) from kernels group by pid order by pid")
            .unwrap();
        let per_pid: Vec<(i64, i64)> = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(per_pid, [(100, 5), (200, 4)]);
        assert_eq!(
            one("select count(*) from rocpd_metadata where tag = 'schema_version'"),
            2
        );
        // The inputs are untouched; the output is never overwritten; the
        // same database twice is refused, and leaves no output behind.
        assert!(merge_databases(&[&a, &b], &out, create).is_err());
        let twice = d.join("twice.db");
        let e = merge_databases(&[&a, &a], &twice, create).unwrap_err();
        assert!(e.to_string().contains("same database"), "{e}");
        assert!(!twice.exists());
        let not_db = d.join("x.pftrace");
        std::fs::write(&not_db, b"not a database").unwrap();
        assert!(merge_databases(&[&a, &not_db], &d.join("y.db"), create).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
