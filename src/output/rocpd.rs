//! `NAME_results.db`: the run as a rocpd SQLite database, the format rocprofv3
//! writes by default since ROCm 7.0, so that users' SQL and AMD's `rocpd` tools
//! read rprof's runs too.
//!
//! Owns the database file of one process: the schema (written here from the
//! published table, view and column names of rocpd schema version 3, not copied
//! from AMD's files), the per-process table suffix and GUID, and the rows of each
//! record kind rprof has. It must not touch anything but its own file, and it
//! runs only on the writer thread: never on the interceptor or completion paths.
//!
//! # Layout
//!
//! Every table is named `rocpd_<kind>_<uuid>` where `<uuid>` is this database's
//! UUIDv7 with `-` turned into `_`; an unsuffixed alias view per table
//! (`rocpd_kernel_dispatch`, ...) and the data views users query (`kernels`,
//! `top_kernels`, `kernel_symbols`, `processes`, `threads`, `regions`,
//! `samples`, `regions_and_samples`, `memory_copies`, `code_objects`) are built
//! on the aliases. Every row carries the GUID, so several databases can be
//! ATTACHed into one connection and told apart (see docs/trace-format.md).
//!
//! # Durability
//!
//! Rows are written inside one transaction that is committed at most once a
//! second (on the writer's periodic flush) and at the end. The journal is
//! SQLite's default rollback journal, so a process killed mid-run leaves a
//! database holding every committed second; what the open transaction held is
//! lost (about a second of records at most).
//!
//! # Ids
//!
//! `rocpd_kernel_dispatch.id` is rprof's dispatch id, `rocpd_info_kernel_symbol.id`
//! its kernel id, `rocpd_info_queue.id` ROCr's queue id, `rocpd_info_thread.id`
//! the OS thread id, `rocpd_info_process.id` the pid, and `rocpd_info_agent.id`
//! the GPU agent's index in rprof's agent table. Row 0 of the queue and stream
//! tables is the "Default Queue" / "Default Stream", as rocprofv3 writes them.

use std::collections::HashSet;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use rusqlite::{params, Connection};

use crate::config::ensure_parent;
use crate::record::{
    AgentInfo, DispatchRecord, InterceptRecord, MemoryCopyRecord, RunInfo, RunMetadata,
};
use crate::sink::{KernelInfo, RecordSink};

/// The schema version rocpd readers check in `rocpd_metadata`.
pub const SCHEMA_VERSION: &str = "3";

/// How often the open transaction is committed while records flow.
const COMMIT_EVERY: Duration = Duration::from_secs(1);

/// The category string of kernel dispatch events (rocprofv3's buffer-kind name).
const KERNEL_DISPATCH: &str = "KERNEL_DISPATCH";
/// The buffer-kind name of memory copies (the category of their events).
const MEMORY_COPY: &str = "MEMORY_COPY";

/// Tables, in creation order (parents before children). `{uuid}` is the
/// per-database suffix, `{guid}` the GUID. Column names and types follow rocpd
/// schema version 3.
const TABLES: &str = r#"
CREATE TABLE rocpd_metadata{uuid} (
    id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    tag TEXT NOT NULL,
    value TEXT NOT NULL);
CREATE TABLE rocpd_string{uuid} (
    id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    guid TEXT DEFAULT '{guid}' NOT NULL,
    string TEXT NOT NULL UNIQUE ON CONFLICT ABORT);
CREATE TABLE rocpd_info_node{uuid} (
    id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    guid TEXT DEFAULT '{guid}' NOT NULL,
    hash BIGINT NOT NULL UNIQUE,
    machine_id TEXT NOT NULL UNIQUE,
    system_name TEXT, hostname TEXT, release TEXT, version TEXT,
    hardware_name TEXT, domain_name TEXT);
CREATE TABLE rocpd_info_process{uuid} (
    id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    guid TEXT DEFAULT '{guid}' NOT NULL,
    nid INTEGER NOT NULL REFERENCES rocpd_info_node{uuid}(id) ON UPDATE CASCADE,
    ppid INTEGER, pid INTEGER NOT NULL,
    init BIGINT, fini BIGINT, start BIGINT, "end" BIGINT,
    command TEXT,
    environment JSONB DEFAULT '{}' NOT NULL,
    extdata JSONB DEFAULT '{}' NOT NULL);
CREATE TABLE rocpd_info_thread{uuid} (
    id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    guid TEXT DEFAULT '{guid}' NOT NULL,
    nid INTEGER NOT NULL REFERENCES rocpd_info_node{uuid}(id) ON UPDATE CASCADE,
    ppid INTEGER,
    pid INTEGER NOT NULL REFERENCES rocpd_info_process{uuid}(id) ON UPDATE CASCADE,
    tid INTEGER NOT NULL,
    name TEXT, start BIGINT, "end" BIGINT,
    extdata JSONB DEFAULT '{}' NOT NULL);
CREATE TABLE rocpd_info_agent{uuid} (
    id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    guid TEXT DEFAULT '{guid}' NOT NULL,
    nid INTEGER NOT NULL REFERENCES rocpd_info_node{uuid}(id) ON UPDATE CASCADE,
    pid INTEGER NOT NULL REFERENCES rocpd_info_process{uuid}(id) ON UPDATE CASCADE,
    type TEXT CHECK (type IN ('CPU', 'GPU')),
    absolute_index INTEGER, logical_index INTEGER, type_index INTEGER, uuid INTEGER,
    name TEXT, model_name TEXT, vendor_name TEXT, product_name TEXT, user_name TEXT,
    extdata JSONB DEFAULT '{}' NOT NULL);
CREATE TABLE rocpd_info_queue{uuid} (
    id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    guid TEXT DEFAULT '{guid}' NOT NULL,
    nid INTEGER NOT NULL REFERENCES rocpd_info_node{uuid}(id) ON UPDATE CASCADE,
    pid INTEGER NOT NULL REFERENCES rocpd_info_process{uuid}(id) ON UPDATE CASCADE,
    name TEXT,
    extdata JSONB DEFAULT '{}' NOT NULL);
CREATE TABLE rocpd_info_stream{uuid} (
    id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    guid TEXT DEFAULT '{guid}' NOT NULL,
    nid INTEGER NOT NULL REFERENCES rocpd_info_node{uuid}(id) ON UPDATE CASCADE,
    pid INTEGER NOT NULL REFERENCES rocpd_info_process{uuid}(id) ON UPDATE CASCADE,
    name TEXT,
    extdata JSONB DEFAULT '{}' NOT NULL);
CREATE TABLE rocpd_info_pmc{uuid} (
    id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    guid TEXT DEFAULT '{guid}' NOT NULL,
    nid INTEGER NOT NULL REFERENCES rocpd_info_node{uuid}(id) ON UPDATE CASCADE,
    pid INTEGER NOT NULL REFERENCES rocpd_info_process{uuid}(id) ON UPDATE CASCADE,
    agent_id INTEGER REFERENCES rocpd_info_agent{uuid}(id) ON UPDATE CASCADE,
    target_arch TEXT CHECK (target_arch IN ('CPU', 'GPU')),
    event_code INTEGER, instance_id INTEGER,
    name TEXT NOT NULL, symbol TEXT NOT NULL,
    description TEXT, long_description TEXT, component TEXT, units TEXT,
    value_type TEXT CHECK (value_type IN ('ABS', 'ACCUM', 'RELATIVE')),
    block TEXT, expression TEXT, is_constant INTEGER, is_derived INTEGER,
    extdata JSONB DEFAULT '{}' NOT NULL);
CREATE TABLE rocpd_info_code_object{uuid} (
    id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    guid TEXT DEFAULT '{guid}' NOT NULL,
    nid INTEGER NOT NULL REFERENCES rocpd_info_node{uuid}(id) ON UPDATE CASCADE,
    pid INTEGER NOT NULL REFERENCES rocpd_info_process{uuid}(id) ON UPDATE CASCADE,
    agent_id INTEGER REFERENCES rocpd_info_agent{uuid}(id) ON UPDATE CASCADE,
    uri TEXT, load_base BIGINT, load_size BIGINT, load_delta BIGINT,
    storage_type TEXT CHECK (storage_type IN ('FILE', 'MEMORY')),
    extdata JSONB DEFAULT '{}' NOT NULL);
CREATE TABLE rocpd_info_kernel_symbol{uuid} (
    id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    guid TEXT DEFAULT '{guid}' NOT NULL,
    nid INTEGER NOT NULL REFERENCES rocpd_info_node{uuid}(id) ON UPDATE CASCADE,
    pid INTEGER NOT NULL REFERENCES rocpd_info_process{uuid}(id) ON UPDATE CASCADE,
    code_object_id INTEGER NOT NULL
        REFERENCES rocpd_info_code_object{uuid}(id) ON UPDATE CASCADE,
    kernel_name TEXT, display_name TEXT,
    kernel_object INTEGER, kernarg_segment_size INTEGER, kernarg_segment_alignment INTEGER,
    group_segment_size INTEGER, private_segment_size INTEGER,
    sgpr_count INTEGER, arch_vgpr_count INTEGER, accum_vgpr_count INTEGER,
    extdata JSONB DEFAULT '{}' NOT NULL);
CREATE TABLE rocpd_track{uuid} (
    id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    guid TEXT DEFAULT '{guid}' NOT NULL,
    nid INTEGER NOT NULL REFERENCES rocpd_info_node{uuid}(id) ON UPDATE CASCADE,
    pid INTEGER REFERENCES rocpd_info_process{uuid}(id) ON UPDATE CASCADE,
    tid INTEGER REFERENCES rocpd_info_thread{uuid}(id) ON UPDATE CASCADE,
    name_id INTEGER REFERENCES rocpd_string{uuid}(id) ON UPDATE CASCADE,
    extdata JSONB DEFAULT '{}' NOT NULL);
CREATE TABLE rocpd_event{uuid} (
    id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    guid TEXT DEFAULT '{guid}' NOT NULL,
    category_id INTEGER REFERENCES rocpd_string{uuid}(id) ON UPDATE CASCADE,
    stack_id INTEGER, parent_stack_id INTEGER, correlation_id INTEGER,
    call_stack JSONB DEFAULT '{}' NOT NULL,
    line_info JSONB DEFAULT '{}' NOT NULL,
    extdata JSONB DEFAULT '{}' NOT NULL);
CREATE TABLE rocpd_arg{uuid} (
    id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    guid TEXT DEFAULT '{guid}' NOT NULL,
    event_id INTEGER NOT NULL REFERENCES rocpd_event{uuid}(id) ON UPDATE CASCADE,
    position INTEGER NOT NULL, type TEXT NOT NULL, name TEXT NOT NULL, value TEXT,
    extdata JSONB DEFAULT '{}' NOT NULL);
CREATE TABLE rocpd_pmc_event{uuid} (
    id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    guid TEXT DEFAULT '{guid}' NOT NULL,
    event_id INTEGER REFERENCES rocpd_event{uuid}(id) ON UPDATE CASCADE,
    pmc_id INTEGER NOT NULL REFERENCES rocpd_info_pmc{uuid}(id) ON UPDATE CASCADE,
    value REAL DEFAULT 0.0,
    extdata JSONB DEFAULT '{}');
CREATE TABLE rocpd_region{uuid} (
    id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    guid TEXT DEFAULT '{guid}' NOT NULL,
    nid INTEGER NOT NULL REFERENCES rocpd_info_node{uuid}(id) ON UPDATE CASCADE,
    pid INTEGER NOT NULL REFERENCES rocpd_info_process{uuid}(id) ON UPDATE CASCADE,
    tid INTEGER NOT NULL REFERENCES rocpd_info_thread{uuid}(id) ON UPDATE CASCADE,
    start BIGINT NOT NULL, "end" BIGINT NOT NULL,
    name_id INTEGER NOT NULL REFERENCES rocpd_string{uuid}(id) ON UPDATE CASCADE,
    event_id INTEGER REFERENCES rocpd_event{uuid}(id) ON UPDATE CASCADE,
    extdata JSONB DEFAULT '{}' NOT NULL);
CREATE TABLE rocpd_sample{uuid} (
    id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    guid TEXT DEFAULT '{guid}' NOT NULL,
    track_id INTEGER NOT NULL REFERENCES rocpd_track{uuid}(id) ON UPDATE CASCADE,
    timestamp BIGINT NOT NULL,
    event_id INTEGER REFERENCES rocpd_event{uuid}(id) ON UPDATE CASCADE,
    extdata JSONB DEFAULT '{}' NOT NULL);
CREATE TABLE rocpd_kernel_dispatch{uuid} (
    id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    guid TEXT DEFAULT '{guid}' NOT NULL,
    nid INTEGER NOT NULL REFERENCES rocpd_info_node{uuid}(id) ON UPDATE CASCADE,
    pid INTEGER NOT NULL REFERENCES rocpd_info_process{uuid}(id) ON UPDATE CASCADE,
    tid INTEGER REFERENCES rocpd_info_thread{uuid}(id) ON UPDATE CASCADE,
    agent_id INTEGER NOT NULL REFERENCES rocpd_info_agent{uuid}(id) ON UPDATE CASCADE,
    kernel_id INTEGER NOT NULL
        REFERENCES rocpd_info_kernel_symbol{uuid}(id) ON UPDATE CASCADE,
    dispatch_id INTEGER NOT NULL,
    queue_id INTEGER NOT NULL REFERENCES rocpd_info_queue{uuid}(id) ON UPDATE CASCADE,
    stream_id INTEGER NOT NULL REFERENCES rocpd_info_stream{uuid}(id) ON UPDATE CASCADE,
    start BIGINT NOT NULL, "end" BIGINT NOT NULL,
    private_segment_size INTEGER, group_segment_size INTEGER,
    workgroup_size_x INTEGER NOT NULL, workgroup_size_y INTEGER NOT NULL,
    workgroup_size_z INTEGER NOT NULL,
    grid_size_x INTEGER NOT NULL, grid_size_y INTEGER NOT NULL, grid_size_z INTEGER NOT NULL,
    region_name_id INTEGER REFERENCES rocpd_string{uuid}(id) ON UPDATE CASCADE,
    event_id INTEGER REFERENCES rocpd_event{uuid}(id) ON UPDATE CASCADE,
    extdata JSONB DEFAULT '{}' NOT NULL);
CREATE TABLE rocpd_memory_copy{uuid} (
    id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    guid TEXT DEFAULT '{guid}' NOT NULL,
    nid INTEGER NOT NULL REFERENCES rocpd_info_node{uuid}(id) ON UPDATE CASCADE,
    pid INTEGER NOT NULL REFERENCES rocpd_info_process{uuid}(id) ON UPDATE CASCADE,
    tid INTEGER REFERENCES rocpd_info_thread{uuid}(id) ON UPDATE CASCADE,
    start BIGINT NOT NULL, "end" BIGINT NOT NULL,
    name_id INTEGER NOT NULL REFERENCES rocpd_string{uuid}(id) ON UPDATE CASCADE,
    dst_agent_id INTEGER REFERENCES rocpd_info_agent{uuid}(id) ON UPDATE CASCADE,
    dst_address INTEGER,
    src_agent_id INTEGER REFERENCES rocpd_info_agent{uuid}(id) ON UPDATE CASCADE,
    src_address INTEGER,
    size INTEGER NOT NULL,
    queue_id INTEGER REFERENCES rocpd_info_queue{uuid}(id) ON UPDATE CASCADE,
    stream_id INTEGER REFERENCES rocpd_info_stream{uuid}(id) ON UPDATE CASCADE,
    region_name_id INTEGER REFERENCES rocpd_string{uuid}(id) ON UPDATE CASCADE,
    event_id INTEGER REFERENCES rocpd_event{uuid}(id) ON UPDATE CASCADE,
    extdata JSONB DEFAULT '{}' NOT NULL);
CREATE TABLE rocpd_memory_allocate{uuid} (
    id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    guid TEXT DEFAULT '{guid}' NOT NULL,
    nid INTEGER NOT NULL REFERENCES rocpd_info_node{uuid}(id) ON UPDATE CASCADE,
    pid INTEGER NOT NULL REFERENCES rocpd_info_process{uuid}(id) ON UPDATE CASCADE,
    tid INTEGER REFERENCES rocpd_info_thread{uuid}(id) ON UPDATE CASCADE,
    agent_id INTEGER REFERENCES rocpd_info_agent{uuid}(id) ON UPDATE CASCADE,
    type TEXT CHECK (type IN ('ALLOC', 'FREE', 'REALLOC', 'RECLAIM')),
    level TEXT CHECK (level IN ('REAL', 'VIRTUAL', 'SCRATCH')),
    start BIGINT NOT NULL, "end" BIGINT NOT NULL,
    address INTEGER, size INTEGER NOT NULL,
    queue_id INTEGER REFERENCES rocpd_info_queue{uuid}(id) ON UPDATE CASCADE,
    stream_id INTEGER REFERENCES rocpd_info_stream{uuid}(id) ON UPDATE CASCADE,
    event_id INTEGER REFERENCES rocpd_event{uuid}(id) ON UPDATE CASCADE,
    extdata JSONB DEFAULT '{}' NOT NULL);
"#;

/// The tables that get an unsuffixed alias view.
const ALIASED: [&str; 19] = [
    "rocpd_metadata",
    "rocpd_string",
    "rocpd_info_node",
    "rocpd_info_process",
    "rocpd_info_thread",
    "rocpd_info_agent",
    "rocpd_info_queue",
    "rocpd_info_stream",
    "rocpd_info_pmc",
    "rocpd_info_code_object",
    "rocpd_info_kernel_symbol",
    "rocpd_track",
    "rocpd_event",
    "rocpd_arg",
    "rocpd_pmc_event",
    "rocpd_region",
    "rocpd_sample",
    "rocpd_kernel_dispatch",
    "rocpd_memory_copy",
];

/// The data views, on the alias views. Joins are on `(id, guid)` so that
/// databases of several processes can be queried together.
const VIEWS: &str = r#"
CREATE VIEW processes AS
    SELECT P.id, P.guid, P.nid, N.machine_id, N.hostname, P.ppid, P.pid,
           P.init, P.start, P."end", P.fini, P.command, P.environment, P.extdata
    FROM rocpd_info_process P
    INNER JOIN rocpd_info_node N ON N.id = P.nid AND N.guid = P.guid;
CREATE VIEW threads AS
    SELECT T.id, T.guid, T.nid, N.hostname, T.ppid, T.pid, T.tid, T.name,
           T.start, T."end", T.extdata
    FROM rocpd_info_thread T
    INNER JOIN rocpd_info_process P ON P.id = T.pid AND P.guid = T.guid
    INNER JOIN rocpd_info_node N ON N.id = T.nid AND N.guid = T.guid;
CREATE VIEW code_objects AS
    SELECT C.id, C.guid, C.nid, C.pid, A.absolute_index AS agent_abs_index,
           C.uri, C.load_base, C.load_size, C.load_delta, C.storage_type, C.extdata
    FROM rocpd_info_code_object C
    INNER JOIN rocpd_info_agent A ON A.id = C.agent_id AND A.guid = C.guid
    INNER JOIN rocpd_info_process P ON P.id = C.pid AND P.guid = C.guid;
CREATE VIEW kernel_symbols AS
    SELECT K.id, K.guid, K.nid, K.pid, K.code_object_id, K.kernel_name, K.display_name,
           K.kernel_object, K.kernarg_segment_size, K.kernarg_segment_alignment,
           K.group_segment_size, K.private_segment_size,
           K.sgpr_count, K.arch_vgpr_count, K.accum_vgpr_count, K.extdata
    FROM rocpd_info_kernel_symbol K
    INNER JOIN rocpd_info_process P ON P.id = K.pid AND P.guid = K.guid;
CREATE VIEW kernels AS
    SELECT K.id, K.guid, T.tid, CAT.string AS category, REG.string AS region,
           S.display_name AS name, K.nid, P.pid,
           A.absolute_index AS agent_abs_index, A.logical_index AS agent_log_index,
           A.type_index AS agent_type_index, A.type AS agent_type,
           S.code_object_id, K.kernel_id, K.dispatch_id, K.stream_id, K.queue_id,
           Q.name AS queue, ST.name AS stream,
           K.start, K."end", (K."end" - K.start) AS duration,
           K.grid_size_x AS grid_x, K.grid_size_y AS grid_y, K.grid_size_z AS grid_z,
           K.workgroup_size_x AS workgroup_x, K.workgroup_size_y AS workgroup_y,
           K.workgroup_size_z AS workgroup_z,
           K.group_segment_size AS lds_size, K.private_segment_size AS scratch_size,
           S.group_segment_size AS static_lds_size,
           S.private_segment_size AS static_scratch_size,
           S.sgpr_count, S.arch_vgpr_count AS vgpr_count, S.accum_vgpr_count,
           E.stack_id, E.parent_stack_id, E.correlation_id AS corr_id
    FROM rocpd_kernel_dispatch K
    INNER JOIN rocpd_info_agent A ON A.id = K.agent_id AND A.guid = K.guid
    INNER JOIN rocpd_event E ON E.id = K.event_id AND E.guid = K.guid
    INNER JOIN rocpd_string CAT ON CAT.id = E.category_id AND CAT.guid = K.guid
    INNER JOIN rocpd_string REG ON REG.id = K.region_name_id AND REG.guid = K.guid
    INNER JOIN rocpd_info_kernel_symbol S ON S.id = K.kernel_id AND S.guid = K.guid
    INNER JOIN rocpd_info_queue Q ON Q.id = K.queue_id AND Q.guid = K.guid
    INNER JOIN rocpd_info_process P ON P.id = Q.pid AND P.guid = K.guid
    INNER JOIN rocpd_info_thread T ON T.id = K.tid AND T.guid = K.guid
    LEFT JOIN rocpd_info_stream ST ON ST.id = K.stream_id AND ST.guid = K.guid;
CREATE VIEW top_kernels AS
    SELECT name, COUNT(*) AS total_calls,
           SUM(duration) / 1000.0 AS total_duration,
           SUM(duration) / 1000.0 / COUNT(*) AS average,
           SUM(duration) * 100.0 / (SELECT SUM(duration) FROM kernels) AS percentage
    FROM kernels GROUP BY name ORDER BY total_duration DESC;
CREATE VIEW regions AS
    SELECT R.id, R.guid, R.nid, P.pid, T.tid, R.start, R."end",
           (R."end" - R.start) AS duration, CAT.string AS category, NAME.string AS name,
           E.stack_id, E.parent_stack_id, E.correlation_id AS corr_id, E.extdata
    FROM rocpd_region R
    INNER JOIN rocpd_event E ON E.id = R.event_id AND E.guid = R.guid
    INNER JOIN rocpd_string CAT ON CAT.id = E.category_id AND CAT.guid = R.guid
    INNER JOIN rocpd_string NAME ON NAME.id = R.name_id AND NAME.guid = R.guid
    INNER JOIN rocpd_info_process P ON P.id = R.pid AND P.guid = R.guid
    INNER JOIN rocpd_info_thread T ON T.id = R.tid AND T.guid = R.guid;
CREATE VIEW samples AS
    SELECT S.id, S.guid, TR.nid, P.pid, T.tid, S.timestamp, NAME.string AS name,
           CAT.string AS category, E.stack_id, E.parent_stack_id,
           E.correlation_id AS corr_id, E.extdata
    FROM rocpd_sample S
    INNER JOIN rocpd_track TR ON TR.id = S.track_id AND TR.guid = S.guid
    INNER JOIN rocpd_event E ON E.id = S.event_id AND E.guid = S.guid
    INNER JOIN rocpd_string CAT ON CAT.id = E.category_id AND CAT.guid = S.guid
    INNER JOIN rocpd_string NAME ON NAME.id = TR.name_id AND NAME.guid = S.guid
    INNER JOIN rocpd_info_process P ON P.id = TR.pid AND P.guid = S.guid
    INNER JOIN rocpd_info_thread T ON T.id = TR.tid AND T.guid = S.guid;
CREATE VIEW sample_regions AS
    SELECT id, guid, nid, pid, tid, timestamp AS start, timestamp AS "end",
           0 AS duration, category, name, stack_id, parent_stack_id, corr_id, extdata
    FROM samples;
CREATE VIEW regions_and_samples AS
    SELECT * FROM regions UNION ALL SELECT * FROM sample_regions;
CREATE VIEW memory_copies AS
    SELECT M.id, M.guid, M.nid, P.pid, T.tid, M.start, M."end",
           (M."end" - M.start) AS duration, CAT.string AS category, NAME.string AS name,
           REG.string AS region_name, M.size,
           DST.absolute_index AS dst_agent_abs_index, DST.type AS dst_agent_type,
           M.dst_address,
           SRC.absolute_index AS src_agent_abs_index, SRC.type AS src_agent_type,
           M.src_address,
           Q.name AS queue, ST.name AS stream, E.correlation_id AS corr_id
    FROM rocpd_memory_copy M
    INNER JOIN rocpd_string NAME ON NAME.id = M.name_id AND NAME.guid = M.guid
    INNER JOIN rocpd_info_agent DST ON DST.id = M.dst_agent_id AND DST.guid = M.guid
    INNER JOIN rocpd_info_agent SRC ON SRC.id = M.src_agent_id AND SRC.guid = M.guid
    INNER JOIN rocpd_event E ON E.id = M.event_id AND E.guid = M.guid
    INNER JOIN rocpd_string CAT ON CAT.id = E.category_id AND CAT.guid = M.guid
    INNER JOIN rocpd_info_process P ON P.id = M.pid AND P.guid = M.guid
    INNER JOIN rocpd_info_thread T ON T.id = M.tid AND T.guid = M.guid
    LEFT JOIN rocpd_string REG ON REG.id = M.region_name_id AND REG.guid = M.guid
    LEFT JOIN rocpd_info_queue Q ON Q.id = M.queue_id AND Q.guid = M.guid
    LEFT JOIN rocpd_info_stream ST ON ST.id = M.stream_id AND ST.guid = M.guid;
"#;

/// The code object row of kernels whose code object rprof could not read
/// (written only if there is such a kernel; real code objects count from 1).
const UNKNOWN_CODE_OBJECT_ID: i64 = 0;

/// Streams a run into a rocpd database.
pub struct RocpdSink {
    db: Connection,
    suffix: String,
    guid: String,
    node_id: i64,
    pid: i64,
    last_commit: Instant,
    /// String ids by text (kernel names are not strings in rocpd: they live in the
    /// kernel-symbol table). Bounded by the distinct categories and names.
    strings: std::collections::HashMap<String, i64>,
    threads: HashSet<u32>,
    queues: HashSet<u64>,
    kernels: HashSet<u64>,
    next_event: i64,
    /// ROCTx marks' tracks (one per thread, named after the category).
    marker_tracks: std::collections::HashMap<u32, i64>,
    /// Code object rows written (ids of [`crate::code_object::loaded`], and
    /// [`UNKNOWN_CODE_OBJECT_ID`]).
    code_objects: HashSet<i64>,
    /// rocpd agent ids (the run's agent index) by `hsa_agent_t` handle.
    agent_ids: std::collections::HashMap<u64, i64>,
}

impl std::fmt::Debug for RocpdSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocpdSink")
            .field("guid", &self.guid)
            .finish_non_exhaustive()
    }
}

fn to_io(e: rusqlite::Error) -> io::Error {
    io::Error::other(e)
}

/// SQLite integers are signed 64-bit; ids and addresses above `i64::MAX` keep their bits.
fn int(v: u64) -> i64 {
    v as i64
}

impl RocpdSink {
    /// Creates the database file `path`, which must not exist (the file is created
    /// exclusively first, like every rprof output, then opened by SQLite).
    pub fn create(path: &Path) -> io::Result<Self> {
        ensure_parent(path)?;
        drop(super::files::create_new(path)?);
        let db = Connection::open(path).map_err(to_io)?;
        let uuid = uuid::Uuid::now_v7();
        let guid = uuid.hyphenated().to_string();
        let suffix = format!("_{}", guid.replace('-', "_"));
        // The rollback journal keeps every committed transaction readable after a
        // kill; the file's durability against power loss is not rprof's concern.
        db.execute_batch("PRAGMA synchronous = OFF; PRAGMA foreign_keys = ON;")
            .map_err(to_io)?;
        Ok(RocpdSink {
            db,
            suffix,
            guid,
            node_id: 0,
            pid: 0,
            last_commit: Instant::now(),
            strings: Default::default(),
            threads: HashSet::new(),
            queues: HashSet::new(),
            kernels: HashSet::new(),
            next_event: 1,
            marker_tracks: Default::default(),
            code_objects: HashSet::new(),
            agent_ids: Default::default(),
        })
    }

    /// The database's GUID (also in `rocpd_metadata` under `guid`).
    pub fn guid(&self) -> &str {
        &self.guid
    }

    fn table(&self, name: &str) -> String {
        format!("{name}{}", self.suffix)
    }

    fn create_schema(&self) -> rusqlite::Result<()> {
        let tables = TABLES
            .replace("{uuid}", &self.suffix)
            .replace("{guid}", &self.guid);
        self.db.execute_batch(&tables)?;
        let mut aliases = String::new();
        for name in ALIASED {
            aliases.push_str(&format!(
                "CREATE VIEW {name} AS SELECT * FROM {name}{};\n",
                self.suffix
            ));
        }
        self.db.execute_batch(&aliases)?;
        self.db.execute_batch(VIEWS)?;
        let metadata = self.table("rocpd_metadata");
        for (tag, value) in [
            ("schema_version", SCHEMA_VERSION),
            ("uuid", self.suffix.as_str()),
            ("guid", self.guid.as_str()),
        ] {
            self.db.execute(
                &format!("INSERT INTO {metadata} (tag, value) VALUES (?1, ?2)"),
                params![tag, value],
            )?;
        }
        Ok(())
    }

    /// The id of `text` in the string table, inserting it on first use.
    fn string_id(&mut self, text: &str) -> rusqlite::Result<i64> {
        if let Some(&id) = self.strings.get(text) {
            return Ok(id);
        }
        let table = self.table("rocpd_string");
        self.db
            .prepare_cached(&format!("INSERT INTO {table} (string) VALUES (?1)"))?
            .execute(params![text])?;
        let id = self.db.last_insert_rowid();
        self.strings.insert(text.to_owned(), id);
        Ok(id)
    }

    fn insert_node(&mut self, run: &RunInfo) -> rusqlite::Result<()> {
        let machine_id = machine_id();
        let hash = fnv1a(machine_id.as_bytes()) % i64::MAX as u64;
        self.node_id = (hash % u64::from(u32::MAX)) as i64;
        let uname = Uname::read();
        let table = self.table("rocpd_info_node");
        self.db.execute(
            &format!(
                "INSERT INTO {table} (id, hash, machine_id, system_name, hostname, release, \
                 version, hardware_name, domain_name) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
            ),
            params![
                self.node_id,
                int(hash),
                machine_id,
                uname.system_name,
                run.hostname,
                uname.release,
                uname.version,
                uname.machine,
                uname.domain_name
            ],
        )?;
        Ok(())
    }

    fn insert_process(&mut self, run: &RunInfo) -> rusqlite::Result<()> {
        self.pid = i64::from(run.pid);
        // SAFETY: getppid has no preconditions and cannot fail.
        let ppid = unsafe { libc::getppid() };
        let table = self.table("rocpd_info_process");
        self.db.execute(
            &format!(
                "INSERT INTO {table} (id, nid, ppid, pid, init, start, command, extdata) \
                 VALUES (?1, ?2, ?3, ?1, ?4, ?4, ?5, ?6)"
            ),
            params![
                self.pid,
                self.node_id,
                ppid,
                int(run.start_ns),
                run.cmdline.join(" "),
                serde_json::json!({ "device": run.device() }).to_string()
            ],
        )?;
        Ok(())
    }

    fn insert_agents(&mut self, agents: &[AgentInfo]) -> rusqlite::Result<()> {
        let table = self.table("rocpd_info_agent");
        for agent in agents {
            self.agent_ids.insert(agent.handle, i64::from(agent.index));
            let extdata = serde_json::json!({
                "handle": agent.handle,
                "compute_units": agent.compute_units,
            })
            .to_string();
            self.db.execute(
                &format!(
                    "INSERT INTO {table} (id, nid, pid, type, absolute_index, logical_index, \
                     type_index, name, model_name, vendor_name, product_name, user_name, extdata) \
                     VALUES (?1, ?2, ?3, ?7, ?1, ?1, ?8, ?4, ?4, 'AMD', ?5, ?5, ?6)"
                ),
                params![
                    i64::from(agent.index),
                    self.node_id,
                    self.pid,
                    agent.name,
                    agent.product_name,
                    extdata,
                    if agent.cpu { "CPU" } else { "GPU" },
                    // Index among the agents of its type.
                    agents
                        .iter()
                        .filter(|a| a.cpu == agent.cpu && a.index < agent.index)
                        .count() as i64
                ],
            )?;
        }
        Ok(())
    }

    fn insert_defaults(&mut self) -> rusqlite::Result<()> {
        for (table, name) in [
            ("rocpd_info_queue", "Default Queue"),
            ("rocpd_info_stream", "Default Stream"),
        ] {
            let table = self.table(table);
            self.db.execute(
                &format!("INSERT INTO {table} (id, nid, pid, name) VALUES (0, ?1, ?2, ?3)"),
                params![self.node_id, self.pid, name],
            )?;
        }
        // rocprofv3 numbers the empty string 1; the kernel view's region joins on it.
        self.string_id("")?;
        self.string_id(KERNEL_DISPATCH)?;
        Ok(())
    }

    fn ensure_thread(&mut self, tid: u32) -> rusqlite::Result<()> {
        if !self.threads.insert(tid) {
            return Ok(());
        }
        let table = self.table("rocpd_info_thread");
        self.db
            .prepare_cached(&format!(
                "INSERT INTO {table} (id, nid, pid, tid) VALUES (?1, ?2, ?3, ?1)"
            ))?
            .execute(params![i64::from(tid), self.node_id, self.pid])?;
        Ok(())
    }

    fn ensure_queue(&mut self, queue_id: u64) -> rusqlite::Result<()> {
        if !self.queues.insert(queue_id) {
            return Ok(());
        }
        // "Queue N", N counting the queues seen, from 0.
        let name = format!("Queue {}", self.queues.len() - 1);
        let table = self.table("rocpd_info_queue");
        self.db
            .prepare_cached(&format!(
                "INSERT OR IGNORE INTO {table} (id, nid, pid, name) VALUES (?1, ?2, ?3, ?4)"
            ))?
            .execute(params![int(queue_id), self.node_id, self.pid, name])?;
        Ok(())
    }

    /// The row of loaded code object `id` ([`crate::code_object::loaded`];
    /// 0 or unknown: a row without facts), written once; returns its id.
    fn ensure_code_object(&mut self, id: u64) -> rusqlite::Result<i64> {
        let loaded = crate::code_object::loaded(id);
        let row = loaded
            .as_ref()
            .map_or(UNKNOWN_CODE_OBJECT_ID, |c| int(c.id));
        if !self.code_objects.insert(row) {
            return Ok(row);
        }
        let table = self.table("rocpd_info_code_object");
        match loaded {
            Some(c) => {
                let storage = if c.in_memory { "MEMORY" } else { "FILE" };
                let extdata =
                    serde_json::json!({ "size": c.size, "storage_type": storage }).to_string();
                self.db.execute(
                    &format!(
                        "INSERT INTO {table} (id, nid, pid, agent_id, uri, load_base, load_size, \
                         load_delta, storage_type, extdata) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
                    ),
                    params![
                        row,
                        self.node_id,
                        self.pid,
                        self.agent_ids.get(&c.agent_handle).copied(),
                        c.uri,
                        int(c.load_base),
                        int(c.load_size),
                        c.load_delta,
                        storage,
                        extdata
                    ],
                )?;
            }
            None => {
                self.db.execute(
                    &format!("INSERT INTO {table} (id, nid, pid) VALUES (?1, ?2, ?3)"),
                    params![row, self.node_id, self.pid],
                )?;
            }
        }
        Ok(row)
    }

    fn ensure_kernel(
        &mut self,
        rec: &DispatchRecord,
        kernel: &KernelInfo<'_>,
    ) -> rusqlite::Result<()> {
        if !self.kernels.insert(kernel.kernel_id) {
            return Ok(());
        }
        let code_object =
            self.ensure_code_object(kernel.resources.map_or(0, |r| r.code_object_id))?;
        let table = self.table("rocpd_info_kernel_symbol");
        self.db
            .prepare_cached(&format!(
                "INSERT INTO {table} (id, nid, pid, code_object_id, kernel_name, display_name, \
                 kernel_object, group_segment_size, private_segment_size, \
                 sgpr_count, arch_vgpr_count, accum_vgpr_count) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"
            ))?
            .execute(params![
                int(kernel.kernel_id),
                self.node_id,
                self.pid,
                code_object,
                kernel.symbol_name,
                kernel.display_name,
                int(rec.kernel_object),
                // The static sizes from the metadata when known (the kernel
                // symbol's), else the first dispatch's.
                kernel
                    .resources
                    .map_or(rec.group_segment_size, |r| r.group_segment_fixed_size),
                kernel
                    .resources
                    .map_or(rec.private_segment_size, |r| r.private_segment_fixed_size),
                kernel.resources.map(|r| r.sgpr_count),
                kernel.resources.map(|r| r.arch_vgpr_count),
                kernel.resources.map(|r| r.accum_vgpr_count)
            ])?;
        Ok(())
    }

    /// A new event row (ids count from 1 per database); returns its id.
    /// Kernels and copies: stack and parent = rprof's correlation id,
    /// external correlation 0; markers: parent 0, the correlation id twice.
    fn insert_event(
        &mut self,
        category: i64,
        stack_id: i64,
        parent_stack_id: i64,
        correlation_id: i64,
        extdata: &str,
    ) -> rusqlite::Result<i64> {
        let event_id = self.next_event;
        self.next_event += 1;
        let events = self.table("rocpd_event");
        self.db
            .prepare_cached(&format!(
                "INSERT INTO {events} (id, category_id, stack_id, parent_stack_id, correlation_id, \
                 extdata) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
            ))?
            .execute(params![
                event_id,
                category,
                stack_id,
                parent_stack_id,
                correlation_id,
                extdata
            ])?;
        Ok(event_id)
    }

    /// One ROCTx marker, as rocprofv3 writes API records: an event with
    /// `{"message": ...}`, then a region (ranges, named after the operation)
    /// or a sample on the thread's marker track (marks).
    fn insert_marker(&mut self, r: &crate::marker::MarkerRecord) -> rusqlite::Result<()> {
        use crate::marker::MarkerKind;
        self.ensure_thread(r.thread_id)?;
        let category = self.string_id(crate::marker::MARKER_DOMAIN)?;
        let extdata = serde_json::json!({ "message": r.message }).to_string();
        let corr = int(r.correlation_id);
        let event_id = self.insert_event(category, corr, 0, corr, &extdata)?;
        if r.kind == MarkerKind::Mark {
            let track = match self.marker_tracks.get(&r.thread_id) {
                Some(&t) => t,
                None => {
                    let tracks = self.table("rocpd_track");
                    self.db
                        .prepare_cached(&format!(
                            "INSERT INTO {tracks} (nid, pid, tid, name_id) VALUES (?1, ?2, ?3, ?4)"
                        ))?
                        .execute(params![
                            self.node_id,
                            self.pid,
                            i64::from(r.thread_id),
                            category
                        ])?;
                    let t = self.db.last_insert_rowid();
                    self.marker_tracks.insert(r.thread_id, t);
                    t
                }
            };
            let samples = self.table("rocpd_sample");
            self.db
                .prepare_cached(&format!(
                    "INSERT INTO {samples} (id, track_id, timestamp, event_id) VALUES (?1, ?2, ?3, ?4)"
                ))?
                .execute(params![int(r.correlation_id), track, int(r.start_ns), event_id])?;
            return Ok(());
        }
        let name = self.string_id(r.kind.operation())?;
        let regions = self.table("rocpd_region");
        self.db
            .prepare_cached(&format!(
                "INSERT INTO {regions} (id, nid, pid, tid, start, \"end\", name_id, event_id) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
            ))?
            .execute(params![
                int(r.correlation_id),
                self.node_id,
                self.pid,
                i64::from(r.thread_id),
                int(r.start_ns),
                int(r.end_ns),
                name,
                event_id
            ])?;
        Ok(())
    }

    fn insert_dispatch(
        &mut self,
        rec: &DispatchRecord,
        kernel: &KernelInfo<'_>,
        region: Option<&str>,
    ) -> rusqlite::Result<()> {
        self.ensure_thread(rec.thread_id)?;
        self.ensure_queue(rec.queue_id)?;
        self.ensure_kernel(rec, kernel)?;
        let category = self.string_id(KERNEL_DISPATCH)?;
        // --kernel-rename: the enclosing ROCTx range ("" otherwise).
        let region = self.string_id(region.unwrap_or(""))?;
        let corr = int(rec.correlation_id);
        let event_id = self.insert_event(category, corr, corr, 0, "{}")?;
        let dispatches = self.table("rocpd_kernel_dispatch");
        self.db
            .prepare_cached(&format!(
                "INSERT INTO {dispatches} (id, nid, pid, tid, agent_id, kernel_id, dispatch_id, \
                 queue_id, stream_id, start, \"end\", private_segment_size, group_segment_size, \
                 workgroup_size_x, workgroup_size_y, workgroup_size_z, \
                 grid_size_x, grid_size_y, grid_size_z, region_name_id, event_id) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?1, ?7, 0, ?8, ?9, ?10, ?11, ?12, ?13, ?14, \
                 ?15, ?16, ?17, ?18, ?19)"
            ))?
            .execute(params![
                int(rec.dispatch_id),
                self.node_id,
                self.pid,
                i64::from(rec.thread_id),
                i64::from(rec.agent_index),
                int(kernel.kernel_id),
                int(rec.queue_id),
                int(rec.start_ns),
                int(rec.end_ns),
                rec.private_segment_size,
                rec.group_segment_size,
                rec.workgroup[0],
                rec.workgroup[1],
                rec.workgroup[2],
                rec.grid[0],
                rec.grid[1],
                rec.grid[2],
                region,
                event_id
            ])?;
        Ok(())
    }

    /// One memory copy: its event (category `MEMORY_COPY`), then its row,
    /// named by its direction, with both agents (the `memory_copies` view
    /// joins both).
    fn insert_memory_copy(&mut self, rec: &MemoryCopyRecord) -> rusqlite::Result<()> {
        self.ensure_thread(rec.thread_id)?;
        let category = self.string_id(MEMORY_COPY)?;
        let name = self.string_id(rec.direction.name())?;
        let region = self.string_id("")?;
        let corr = int(rec.correlation_id);
        let event_id = self.insert_event(category, corr, corr, 0, "{}")?;
        let copies = self.table("rocpd_memory_copy");
        self.db
            .prepare_cached(&format!(
                "INSERT INTO {copies} (nid, pid, tid, start, \"end\", name_id, dst_agent_id, \
                 src_agent_id, size, stream_id, region_name_id, event_id) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 0, ?10, ?11)"
            ))?
            .execute(params![
                self.node_id,
                self.pid,
                i64::from(rec.thread_id),
                int(rec.start_ns),
                int(rec.end_ns),
                name,
                i64::from(rec.dst_agent),
                i64::from(rec.src_agent),
                int(rec.bytes),
                region,
                event_id
            ])?;
        Ok(())
    }

    fn commit(&mut self) -> rusqlite::Result<()> {
        self.db.execute_batch("COMMIT; BEGIN;")?;
        self.last_commit = Instant::now();
        Ok(())
    }
}

impl RecordSink for RocpdSink {
    fn start(&mut self, run: &RunInfo, agents: &[AgentInfo]) -> io::Result<()> {
        (|| {
            self.db.execute_batch("BEGIN;")?;
            self.create_schema()?;
            self.insert_node(run)?;
            self.insert_process(run)?;
            self.insert_agents(agents)?;
            self.insert_defaults()?;
            self.commit()
        })()
        .map_err(to_io)
    }

    fn intercept(&mut self, _rec: &InterceptRecord) -> io::Result<()> {
        // rocpd has no table for rprof's interceptor calls; the kernel rows carry
        // their thread and correlation id.
        Ok(())
    }

    fn dispatch(&mut self, rec: &DispatchRecord, kernel: &KernelInfo<'_>) -> io::Result<()> {
        self.insert_dispatch(rec, kernel, None).map_err(to_io)
    }

    fn dispatch_renamed(
        &mut self,
        rec: &DispatchRecord,
        kernel: &KernelInfo<'_>,
        region: &str,
    ) -> io::Result<()> {
        self.insert_dispatch(rec, kernel, Some(region))
            .map_err(to_io)
    }

    fn marker(&mut self, rec: &crate::marker::MarkerRecord) -> io::Result<()> {
        self.insert_marker(rec).map_err(to_io)
    }

    fn memory_copy(&mut self, rec: &MemoryCopyRecord) -> io::Result<()> {
        self.insert_memory_copy(rec).map_err(to_io)
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.last_commit.elapsed() >= COMMIT_EVERY {
            self.commit().map_err(to_io)?;
        }
        Ok(())
    }

    fn finish(&mut self, meta: &RunMetadata) -> io::Result<()> {
        let table = self.table("rocpd_info_process");
        (|| {
            // Every loaded code object has its row, also those whose kernels
            // never ran (as rocprofv3 writes them).
            for id in 1..=crate::code_object::loaded_count() {
                self.ensure_code_object(id)?;
            }
            self.db.execute(
                &format!("UPDATE {table} SET \"end\" = ?1, fini = ?1 WHERE id = ?2"),
                params![int(meta.end_ns), self.pid],
            )?;
            self.db.execute_batch("COMMIT;")
        })()
        .map_err(to_io)
    }
}

/// `/etc/machine-id`, else `/var/lib/dbus/machine-id`, else the host name (the
/// node table needs a unique, stable key).
fn machine_id() -> String {
    ["/etc/machine-id", "/var/lib/dbus/machine-id"]
        .iter()
        .find_map(|p| {
            let id = std::fs::read_to_string(p).ok()?;
            let id = id.trim();
            (!id.is_empty()).then(|| id.to_owned())
        })
        .unwrap_or_else(|| "unknown-machine".to_owned())
}

/// FNV-1a, a stable hash (std's hasher is randomised per process).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The `uname(2)` fields the node table records.
struct Uname {
    system_name: String,
    release: String,
    version: String,
    machine: String,
    domain_name: String,
}

impl Uname {
    fn read() -> Self {
        // SAFETY: utsname is plain old data; all-zero is a valid value.
        let mut u: libc::utsname = unsafe { std::mem::zeroed() };
        // SAFETY: `u` is a valid, writable utsname; uname only writes it.
        let ok = unsafe { libc::uname(&mut u) } == 0;
        let field = |f: &[libc::c_char]| -> String {
            if !ok {
                return String::new();
            }
            let bytes: Vec<u8> = f
                .iter()
                .take_while(|&&c| c != 0)
                .map(|&c| c as u8)
                .collect();
            String::from_utf8_lossy(&bytes).into_owned()
        };
        Uname {
            system_name: field(&u.sysname),
            release: field(&u.release),
            version: field(&u.version),
            machine: field(&u.machine),
            domain_name: field(&u.domainname),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_info() -> RunInfo {
        RunInfo {
            pid: 4242,
            process_name: "app".into(),
            cmdline: vec!["./app".into(), "--n".into(), "3".into()],
            hostname: "host-a".into(),
            start_ns: 1_000,
            ..Default::default()
        }
    }

    fn agents() -> Vec<AgentInfo> {
        vec![
            AgentInfo {
                index: 0,
                name: "gfx90a".into(),
                product_name: "Emulated MI210".into(),
                handle: 0x1000,
                compute_units: 104,
                cpu: false,
            },
            AgentInfo {
                index: 1,
                name: "gfx1030".into(),
                product_name: "Emulated RX 6800".into(),
                handle: 0x2000,
                compute_units: 60,
                cpu: false,
            },
        ]
    }

    fn dispatch(n: u64, queue_id: u64, agent: u32, tid: u32, kernel_object: u64) -> DispatchRecord {
        DispatchRecord {
            correlation_id: (4242 << 32) + n,
            dispatch_id: n,
            agent_index: agent,
            queue_id,
            thread_id: tid,
            kernel_object,
            grid: [256 * n as u32, 1, 1],
            workgroup: [64, 1, 1],
            private_segment_size: 16,
            group_segment_size: 1024,
            enqueue_ns: 1_000 + 100 * n,
            start_ns: 2_000 + 100 * n,
            end_ns: 2_000 + 100 * n + 10 * n,
        }
    }

    /// Writes `n_alpha` dispatches of `alpha` and `n_beta` of `beta` over two queues,
    /// two agents and two threads; returns the database path.
    fn write_run(dir: &Path, n_alpha: u64, n_beta: u64) -> std::path::PathBuf {
        let path = dir.join("run_results.db");
        let mut sink = RocpdSink::create(&path).unwrap();
        sink.start(&run_info(), &agents()).unwrap();
        let alpha = KernelInfo {
            kernel_id: 1,
            display_name: "alpha(int)",
            symbol_name: "_Z5alphai",
            resources: None,
        };
        let beta = KernelInfo {
            kernel_id: 2,
            display_name: "beta",
            symbol_name: "beta",
            resources: None,
        };
        for n in 1..=n_alpha + n_beta {
            let (kernel, object) = if n <= n_alpha {
                (&alpha, 0xa000)
            } else {
                (&beta, 0xb000)
            };
            let rec = dispatch(n, 10 + n % 2, (n % 2) as u32, 100 + (n % 2) as u32, object);
            sink.dispatch(&rec, kernel).unwrap();
            sink.flush().unwrap();
        }
        sink.finish(&RunMetadata {
            dispatches: n_alpha + n_beta,
            end_ns: 99_999,
            ..Default::default()
        })
        .unwrap();
        path
    }

    fn scratch_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("rprof-rocpd-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn count(db: &Connection, sql: &str) -> i64 {
        db.query_row(sql, [], |r| r.get(0)).unwrap()
    }

    #[test]
    fn memory_copies_answer_with_every_copy_and_both_agents() {
        use crate::record::{CopyDirection, MemoryCopyRecord};
        let dir = scratch_dir("copies");
        let path = dir.join("run_results.db");
        let mut sink = RocpdSink::create(&path).unwrap();
        let mut all = agents();
        all.push(AgentInfo {
            index: 2,
            name: "cpu".into(),
            product_name: "Emulated host CPU".into(),
            handle: 0x3000,
            compute_units: 2,
            cpu: true,
        });
        sink.start(&run_info(), &all).unwrap();
        // 3 H2D (CPU 2 -> GPU 0), 2 D2H (GPU 1 -> CPU 2), 1 D2D, 1 H2H.
        let plan = [
            (CopyDirection::HostToDevice, 2, 0, 3),
            (CopyDirection::DeviceToHost, 1, 2, 2),
            (CopyDirection::DeviceToDevice, 0, 1, 1),
            (CopyDirection::HostToHost, 2, 2, 1),
        ];
        let mut n = 0;
        for (direction, src, dst, times) in plan {
            for _ in 0..times {
                n += 1;
                sink.memory_copy(&MemoryCopyRecord {
                    correlation_id: (4242 << 32) + n,
                    thread_id: 100 + (n % 2) as u32,
                    src_agent: src,
                    dst_agent: dst,
                    direction,
                    bytes: 4096 * n,
                    start_ns: 2_000 + 100 * n,
                    end_ns: 2_050 + 100 * n,
                    ..Default::default()
                })
                .unwrap();
            }
        }
        sink.finish(&RunMetadata::default()).unwrap();
        let db = Connection::open(&path).unwrap();
        assert_eq!(count(&db, "SELECT count(*) FROM memory_copies"), 7);
        assert_eq!(count(&db, "SELECT count(*) FROM rocpd_memory_copy"), 7);
        let rows: Vec<(String, i64, String, String, i64)> = db
            .prepare(
                "SELECT name, count(*), src_agent_type, dst_agent_type, sum(size) \
                 FROM memory_copies GROUP BY name ORDER BY name",
            )
            .unwrap()
            .query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let row = |name: &str, count, src: &str, dst: &str, bytes| {
            (
                name.to_owned(),
                count,
                src.to_owned(),
                dst.to_owned(),
                bytes,
            )
        };
        assert_eq!(
            rows,
            vec![
                row("MEMORY_COPY_DEVICE_TO_DEVICE", 1, "GPU", "GPU", 4096 * 6),
                row(
                    "MEMORY_COPY_DEVICE_TO_HOST",
                    2,
                    "GPU",
                    "CPU",
                    4096 * (4 + 5)
                ),
                row(
                    "MEMORY_COPY_HOST_TO_DEVICE",
                    3,
                    "CPU",
                    "GPU",
                    4096 * (1 + 2 + 3)
                ),
                row("MEMORY_COPY_HOST_TO_HOST", 1, "CPU", "CPU", 4096 * 7),
            ]
        );
        assert_eq!(
            count(
                &db,
                "SELECT count(*) FROM memory_copies WHERE category = 'MEMORY_COPY' AND duration = 50"
            ),
            7
        );
        assert_eq!(
            count(
                &db,
                "SELECT count(*) FROM rocpd_info_agent WHERE type = 'CPU' AND type_index = 0"
            ),
            1
        );
        assert_eq!(count(&db, "SELECT count(*) FROM kernels"), 0);
    }

    #[test]
    fn the_views_users_query_first_answer_with_every_dispatch() {
        let dir = scratch_dir("views");
        let path = write_run(&dir, 50, 7);
        let db = Connection::open(&path).unwrap();
        assert_eq!(count(&db, "SELECT count(*) FROM kernels"), 57);
        assert_eq!(
            count(
                &db,
                "SELECT count(*) FROM kernels WHERE name = 'alpha(int)'"
            ),
            50
        );
        assert_eq!(
            count(&db, "SELECT count(*) FROM kernels WHERE name = 'beta'"),
            7
        );
        assert_eq!(count(&db, "SELECT count(*) FROM rocpd_kernel_dispatch"), 57);
        let top: Vec<(String, i64)> = db
            .prepare("SELECT name, total_calls FROM top_kernels ORDER BY name")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            top,
            vec![("alpha(int)".to_owned(), 50), ("beta".to_owned(), 7)]
        );
        // One row per dispatch, with its own values.
        let (start, end, grid, queue, agent, tid, corr): (i64, i64, i64, String, i64, i64, i64) =
            db.query_row(
                "SELECT start, \"end\", grid_x, queue, agent_abs_index, tid, stack_id \
                 FROM kernels WHERE dispatch_id = 3",
                [],
                |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                    ))
                },
            )
            .unwrap();
        assert_eq!((start, end, grid), (2_300, 2_330, 768));
        assert_eq!((queue.as_str(), agent, tid), ("Queue 0", 1, 101));
        assert_eq!(corr, (4242_i64 << 32) + 3);
        assert_eq!(
            count(
                &db,
                "SELECT count(*) FROM processes WHERE pid = 4242 AND \"end\" = 99999"
            ),
            1
        );
        assert_eq!(count(&db, "SELECT count(*) FROM threads"), 2);
        assert_eq!(
            count(&db, "SELECT count(*) FROM rocpd_info_queue"),
            3,
            "default + 2"
        );
        assert_eq!(
            count(
                &db,
                "SELECT count(*) FROM rocpd_info_agent WHERE type = 'GPU'"
            ),
            2
        );
        assert_eq!(count(&db, "SELECT count(*) FROM memory_copies"), 0);
        assert_eq!(count(&db, "SELECT count(*) FROM regions_and_samples"), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn metadata_names_the_schema_and_the_per_process_suffix() {
        let dir = scratch_dir("metadata");
        let path = write_run(&dir, 1, 0);
        let db = Connection::open(&path).unwrap();
        let get = |tag: &str| -> String {
            db.query_row(
                "SELECT value FROM rocpd_metadata WHERE tag = ?1",
                [tag],
                |r| r.get(0),
            )
            .unwrap()
        };
        assert_eq!(get("schema_version"), "3");
        let guid = get("guid");
        assert_eq!(get("uuid"), format!("_{}", guid.replace('-', "_")));
        assert_eq!(uuid::Uuid::parse_str(&guid).unwrap().get_version_num(), 7);
        let suffixed = count(
            &db,
            &format!(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name LIKE 'rocpd_%{}'",
                get("uuid")
            ),
        );
        assert_eq!(suffixed, 20, "every rocpd table carries the suffix");
        assert_eq!(
            count(
                &db,
                &format!("SELECT count(*) FROM rocpd_kernel_dispatch WHERE guid = '{guid}'")
            ),
            1
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn two_processes_attach_into_one_connection_and_stay_apart() {
        let dir_a = scratch_dir("attach-a");
        let dir_b = scratch_dir("attach-b");
        let a = write_run(&dir_a, 5, 0);
        let b = write_run(&dir_b, 0, 3);
        let db = Connection::open_in_memory().unwrap();
        db.execute("ATTACH DATABASE ?1 AS a", [a.to_str().unwrap()])
            .unwrap();
        db.execute("ATTACH DATABASE ?1 AS b", [b.to_str().unwrap()])
            .unwrap();
        let total = count(
            &db,
            "SELECT (SELECT count(*) FROM a.kernels) + (SELECT count(*) FROM b.kernels)",
        );
        assert_eq!(total, 8);
        let a_guid: String = db
            .query_row(
                "SELECT value FROM a.rocpd_metadata WHERE tag='guid'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        let b_guid: String = db
            .query_row(
                "SELECT value FROM b.rocpd_metadata WHERE tag='guid'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_ne!(a_guid, b_guid);
        std::fs::remove_dir_all(&dir_a).unwrap();
        std::fs::remove_dir_all(&dir_b).unwrap();
    }

    #[test]
    fn an_existing_file_is_never_overwritten() {
        let dir = scratch_dir("exists");
        let path = dir.join("run_results.db");
        std::fs::write(&path, b"earlier run").unwrap();
        let err = RocpdSink::create(&path).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&path).unwrap(), b"earlier run");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn committed_seconds_survive_a_kill() {
        // A database whose writer never finished (the process was killed) holds what
        // the last commit held: here, the schema and the first dispatch.
        let dir = scratch_dir("killed");
        let path = dir.join("run_results.db");
        let mut sink = RocpdSink::create(&path).unwrap();
        sink.start(&run_info(), &agents()).unwrap();
        let k = KernelInfo {
            kernel_id: 1,
            display_name: "k",
            symbol_name: "k",
            resources: None,
        };
        sink.dispatch(&dispatch(1, 10, 0, 100, 0xa000), &k).unwrap();
        sink.last_commit = Instant::now() - COMMIT_EVERY;
        sink.flush().unwrap();
        sink.dispatch(&dispatch(2, 10, 0, 100, 0xa000), &k).unwrap();
        std::mem::forget(sink); // no finish, no rollback: as after SIGKILL
        let db = Connection::open(&path).unwrap();
        assert_eq!(count(&db, "SELECT count(*) FROM kernels"), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn markers_become_regions_and_samples_and_renamed_kernels_a_region() {
        use crate::marker::{MarkerKind, MarkerRecord};
        let dir = scratch_dir("markers");
        let path = dir.join("run_results.db");
        let mut sink = RocpdSink::create(&path).unwrap();
        sink.start(&run_info(), &agents()).unwrap();
        let mut id = 0;
        let mut marker = |kind, tid, message, start, end| {
            id += 1;
            MarkerRecord {
                kind,
                correlation_id: id,
                thread_id: tid,
                end_thread_id: tid,
                depth: 0,
                start_ns: start,
                end_ns: end,
                message,
            }
        };
        let mut records = Vec::new();
        for i in 0..5 {
            records.push(marker(MarkerKind::Mark, 100, "tick", 10 + i, 10 + i));
        }
        records.push(marker(MarkerKind::Mark, 101, "say \"hi\"", 20, 20));
        records.push(marker(MarkerKind::ThreadRange, 100, "inner", 30, 40));
        records.push(marker(MarkerKind::ThreadRange, 100, "outer", 25, 45));
        records.push(marker(MarkerKind::ProcessRange, 100, "cross", 22, 60));
        for r in &records {
            sink.marker(r).unwrap();
        }
        let k = KernelInfo {
            kernel_id: 1,
            display_name: "alpha(int)",
            symbol_name: "_Z5alphai",
            resources: None,
        };
        sink.dispatch_renamed(&dispatch(1, 10, 0, 100, 0xa000), &k, "inner")
            .unwrap();
        sink.dispatch(&dispatch(2, 10, 0, 100, 0xa000), &k).unwrap();
        sink.finish(&RunMetadata::default()).unwrap();

        let db = Connection::open(&path).unwrap();
        assert_eq!(count(&db, "SELECT count(*) FROM regions"), 3);
        assert_eq!(count(&db, "SELECT count(*) FROM samples"), 6);
        assert_eq!(count(&db, "SELECT count(*) FROM regions_and_samples"), 9);
        assert_eq!(
            count(
                &db,
                "SELECT count(*) FROM regions WHERE name = 'roctxThreadRangeA'"
            ),
            2
        );
        assert_eq!(
            count(
                &db,
                "SELECT count(*) FROM regions WHERE name = 'roctxProcessRangeA' \
                        AND start = 22 AND \"end\" = 60"
            ),
            1
        );
        assert_eq!(
            count(
                &db,
                "SELECT count(*) FROM regions_and_samples \
                        WHERE category = 'MARKER_CORE_RANGE_API' \
                        AND json_extract(extdata, '$.message') = 'tick'"
            ),
            5
        );
        assert_eq!(
            count(&db, "SELECT count(*) FROM samples WHERE json_extract(extdata, '$.message') = 'say \"hi\"' \
                        AND tid = 101"),
            1
        );
        // One marker track per thread, named after the category.
        assert_eq!(count(&db, "SELECT count(*) FROM rocpd_track"), 2);
        assert_eq!(
            count(&db, "SELECT count(*) FROM kernels WHERE region = 'inner'"),
            1
        );
        assert_eq!(
            count(&db, "SELECT count(*) FROM kernels WHERE region = ''"),
            1
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
