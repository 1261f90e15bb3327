//! A page census of an LMDB data file: which named database owns each page.
//!
//! LMDB copies on write: a commit writes every page it touched under a page number the previous
//! snapshot did not use (pages freed by a commit are reused only by later commits). So the
//! pages of a database in the newest snapshot that were not in the previous snapshot's census
//! are exactly the pages the last commit wrote for that database. Comparing two censuses,
//! taken before and after a commit, shows what the writer's page writes are made of — which
//! tables, branch or leaf, how many per commit. The store-pages benchmark uses it to profile
//! the writer; nothing on the call path does.
//!
//! The census reads `data.mdb` with `pread` (no mapping, no LMDB handle) and walks the newest
//! meta page's trees: the free-page database, the main database and every named database in
//! it (with their duplicate sub-trees). Take it while no write transaction is committing in
//! any process — the store's commit observer runs on the writer thread between commits.

use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Why a census could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum CensusError {
    #[error("cannot read {path}: {reason}")]
    Io { path: String, reason: String },
    #[error("not an LMDB data file: {0}")]
    Format(String),
}

/// Name under which the census lists the main database's own pages (the named-database records).
pub const MAIN: &str = "(main)";
/// Name under which the census lists the free-page database's pages.
pub const FREE: &str = "(free)";

/// The pages of one database, by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pages {
    pub branch: HashSet<u64>,
    pub leaf: HashSet<u64>,
    /// Overflow pages (values too large for a leaf), every page of each run.
    pub overflow: HashSet<u64>,
}

impl Pages {
    pub fn total(&self) -> usize {
        self.branch.len() + self.leaf.len() + self.overflow.len()
    }

    /// Pages held here and not in `before` (what a commit between the two wrote).
    pub fn since(&self, before: Option<&Pages>) -> PageCount {
        let new = |now: &HashSet<u64>, then: Option<&HashSet<u64>>| {
            now.iter()
                .filter(|p| then.is_none_or(|t| !t.contains(p)))
                .count() as u64
        };
        PageCount {
            branch: new(&self.branch, before.map(|b| &b.branch)),
            leaf: new(&self.leaf, before.map(|b| &b.leaf)),
            overflow: new(&self.overflow, before.map(|b| &b.overflow)),
        }
    }
}

/// Page counts by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageCount {
    pub branch: u64,
    pub leaf: u64,
    pub overflow: u64,
}

impl PageCount {
    pub fn total(&self) -> u64 {
        self.branch + self.leaf + self.overflow
    }

    pub fn add(&mut self, other: PageCount) {
        self.branch += other.branch;
        self.leaf += other.leaf;
        self.overflow += other.overflow;
    }
}

/// Where a commit's pages went ([`Census::placement_since`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Placement {
    /// Pages past the previous snapshot's last page: LMDB found no free page and grew the file.
    pub appended: Runs,
    /// Pages the free list gave back: LMDB takes the lowest free page numbers first.
    pub reused: Runs,
}

/// Pages, and how they lie in the file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Runs {
    pub pages: u64,
    /// Runs of consecutive page numbers: about one I/O each when the pages are synced.
    pub runs: u64,
    /// Runs of a single page: a page with no written neighbour on either side.
    pub lone: u64,
}

impl Runs {
    /// The runs of `sorted`, a sorted list of distinct page numbers.
    pub fn of(sorted: &[u64]) -> Runs {
        let mut r = Runs {
            pages: sorted.len() as u64,
            ..Runs::default()
        };
        let mut len = 0u64;
        for (i, p) in sorted.iter().enumerate() {
            len += 1;
            let ends = sorted.get(i + 1).is_none_or(|next| *next != p + 1);
            if ends {
                r.runs += 1;
                r.lone += u64::from(len == 1);
                len = 0;
            }
        }
        r
    }

    pub fn add(&mut self, other: Runs) {
        self.pages += other.pages;
        self.runs += other.runs;
        self.lone += other.lone;
    }
}

/// One snapshot's pages, by database.
#[derive(Debug, Clone, Default)]
pub struct Census {
    pub page_size: u64,
    /// The transaction that committed the snapshot.
    pub txnid: u64,
    /// The last page number in use (free-listed pages included).
    pub last_pgno: u64,
    /// Every named database, plus [`MAIN`] and [`FREE`].
    pub tables: BTreeMap<String, Pages>,
    /// Pages listed as free by the free-page database's records.
    pub free_listed: u64,
}

impl Census {
    /// Pages per database written since `before` (databases with none are left out).
    pub fn written_since(&self, before: &Census) -> BTreeMap<String, PageCount> {
        self.tables
            .iter()
            .map(|(name, pages)| (name.clone(), pages.since(before.tables.get(name))))
            .filter(|(_, c)| c.total() > 0)
            .collect()
    }

    /// Every page written since `before`, whatever its database, as runs of consecutive page
    /// numbers: `(pages, runs)`. A commit's page writes cost the disk about one I/O per run,
    /// so the runs, not the pages, are what a sync waits for on a disk with a high cost per
    /// I/O.
    pub fn runs_since(&self, before: &Census) -> (u64, u64) {
        let r = Runs::of(&self.written_since_sorted(before));
        (r.pages, r.runs)
    }

    /// Where the pages written since `before` went: past the last page `before` used (the file
    /// grew), or onto pages the free list gave back. Each side is counted in runs of its own,
    /// so a run that crosses the old end counts once on each side.
    pub fn placement_since(&self, before: &Census) -> Placement {
        let written = self.written_since_sorted(before);
        let split = written.partition_point(|p| *p <= before.last_pgno);
        Placement {
            reused: Runs::of(&written[..split]),
            appended: Runs::of(&written[split..]),
        }
    }

    /// Every page held now and not in `before`, sorted.
    fn written_since_sorted(&self, before: &Census) -> Vec<u64> {
        let then = before.all_pages();
        let mut written: Vec<u64> = self
            .all_pages()
            .into_iter()
            .filter(|p| !then.contains(p))
            .collect();
        written.sort_unstable();
        written
    }

    /// The pages each database holds now and did not hold in `before` (what a commit between
    /// the two wrote for it), sorted; databases with none are left out.
    pub fn new_pages_since(&self, before: &Census) -> BTreeMap<String, Vec<u64>> {
        let empty = Pages::default();
        self.tables
            .iter()
            .filter_map(|(name, pages)| {
                let then = before.tables.get(name).unwrap_or(&empty);
                let mut new: Vec<u64> = pages
                    .branch
                    .difference(&then.branch)
                    .chain(pages.leaf.difference(&then.leaf))
                    .chain(pages.overflow.difference(&then.overflow))
                    .copied()
                    .collect();
                new.sort_unstable();
                (!new.is_empty()).then(|| (name.clone(), new))
            })
            .collect()
    }

    /// Every page of every database in the snapshot.
    pub fn all_pages(&self) -> HashSet<u64> {
        self.tables
            .values()
            .flat_map(|p| p.branch.iter().chain(&p.leaf).chain(&p.overflow).copied())
            .collect()
    }

    /// Pages reachable from the snapshot: every database's pages.
    pub fn used(&self) -> u64 {
        self.tables.values().map(|p| p.total() as u64).sum()
    }
}

const P_INVALID: u64 = u64::MAX;
const P_BRANCH: u16 = 0x01;
const P_LEAF: u16 = 0x02;
const P_OVERFLOW: u16 = 0x04;
const P_META: u16 = 0x08;
const P_LEAF2: u16 = 0x20;
const F_BIGDATA: u16 = 0x01;
const F_SUBDATA: u16 = 0x02;
const PAGE_HEADER: usize = 16;
const MDB_MAGIC: u32 = 0xBEEF_C0DE;
/// Offsets inside a meta page (64-bit build: 8-byte page numbers and sizes).
const META_DBS: usize = PAGE_HEADER + 24;
const DB_RECORD: usize = 48;
const META_LAST_PG: usize = META_DBS + 2 * DB_RECORD;
const META_TXNID: usize = META_LAST_PG + 8;

/// A database record (`MDB_db`): where its tree starts.
#[derive(Debug, Clone, Copy)]
struct DbRecord {
    root: u64,
}

fn db_record(bytes: &[u8]) -> Option<DbRecord> {
    Some(DbRecord {
        root: u64::from_le_bytes(bytes.get(40..48)?.try_into().ok()?),
    })
}

fn u16_at(page: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(page.get(at..at + 2)?.try_into().ok()?))
}

fn u64_at(page: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(page.get(at..at + 8)?.try_into().ok()?))
}

struct Reader {
    file: File,
    path: String,
    page_size: u64,
    buf: Vec<u8>,
}

impl Reader {
    fn page(&mut self, pgno: u64) -> Result<&[u8], CensusError> {
        self.buf.resize(self.page_size as usize, 0);
        self.file
            .read_exact_at(&mut self.buf, pgno * self.page_size)
            .map_err(|e| CensusError::Io {
                path: self.path.clone(),
                reason: format!("page {pgno}: {e}"),
            })?;
        Ok(&self.buf)
    }
}

/// One leaf node, as far as the census needs it.
enum Leaf {
    Inline,
    Overflow(u64),
    SubTree { key: Vec<u8>, record: DbRecord },
}

/// Called for every leaf node of a walked tree, with its inline value.
type LeafVisitor<'a> = dyn FnMut(&mut Reader, Leaf, &[u8]) -> Result<(), CensusError> + 'a;

/// Take the census of the newest snapshot of the LMDB environment in `dir`.
pub fn census(dir: &Path) -> Result<Census, CensusError> {
    let mut reader = Reader::open(&dir.join("data.mdb"))?;
    let (txnid, meta) = newest_meta(&mut reader)?;
    let bad = || CensusError::Format("damaged meta page".into());
    let free_db = db_record(&meta[META_DBS..META_DBS + DB_RECORD]).ok_or_else(bad)?;
    let main_db =
        db_record(&meta[META_DBS + DB_RECORD..META_DBS + 2 * DB_RECORD]).ok_or_else(bad)?;
    let last_pgno = u64_at(&meta, META_LAST_PG).ok_or_else(bad)?;

    let mut census = Census {
        page_size: reader.page_size,
        txnid,
        last_pgno,
        ..Census::default()
    };
    let (free_pages, free_listed) = free_database(&mut reader, free_db)?;
    census.tables.insert(FREE.into(), free_pages);
    census.free_listed = free_listed;

    // The main database: its leaves name the named databases.
    let mut main_pages = Pages::default();
    let mut named = Vec::new();
    walk(
        &mut reader,
        main_db.root,
        &mut main_pages,
        &mut |_, node, _| {
            if let Leaf::SubTree { key, record } = node {
                named.push((String::from_utf8_lossy(&key).into_owned(), record));
            }
            Ok(())
        },
    )?;
    census.tables.insert(MAIN.into(), main_pages);
    for (name, record) in named {
        census
            .tables
            .insert(name, named_database(&mut reader, record)?);
    }
    Ok(census)
}

impl Reader {
    /// A reader of the data file at `path`, with the page size its first meta page records.
    fn open(path: &Path) -> Result<Reader, CensusError> {
        let file = File::open(path).map_err(|e| CensusError::Io {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        let mut reader = Reader {
            file,
            path: path.display().to_string(),
            page_size: 4096,
            buf: Vec::new(),
        };
        // `mm_psize` is the free-page database record's `md_pad`.
        let page_size = reader
            .page(0)?
            .get(META_DBS..META_DBS + 4)
            .and_then(|b| b.try_into().ok())
            .map(|b| u64::from(u32::from_le_bytes(b)))
            .filter(|p| p.is_power_of_two() && *p >= 512)
            .ok_or_else(|| CensusError::Format("meta page 0 has no page size".into()))?;
        reader.page_size = page_size;
        Ok(reader)
    }
}

/// The transaction id and bytes of the newer of the two meta pages (the first two pages).
fn newest_meta(reader: &mut Reader) -> Result<(u64, Vec<u8>), CensusError> {
    let mut newest: Option<(u64, Vec<u8>)> = None;
    for pgno in 0..2 {
        let page = reader.page(pgno)?.to_vec();
        let magic = u32::from_le_bytes(
            page[PAGE_HEADER..PAGE_HEADER + 4]
                .try_into()
                .unwrap_or_default(),
        );
        if u16_at(&page, 10).unwrap_or(0) & P_META == 0 || magic != MDB_MAGIC {
            return Err(CensusError::Format(format!(
                "page {pgno} is not a meta page"
            )));
        }
        let txnid = u64_at(&page, META_TXNID).unwrap_or(0);
        if newest.as_ref().is_none_or(|(t, _)| txnid > *t) {
            newest = Some((txnid, page));
        }
    }
    newest.ok_or_else(|| CensusError::Format("no meta page".into()))
}

/// The free-page database's pages, and how many free pages its records list (each record: a
/// count, then page numbers).
fn free_database(reader: &mut Reader, db: DbRecord) -> Result<(Pages, u64), CensusError> {
    let mut pages = Pages::default();
    let mut listed = 0u64;
    walk(reader, db.root, &mut pages, &mut |reader, node, value| {
        // An id list too long for a leaf sits on overflow pages; its count comes first.
        listed += match node {
            Leaf::Overflow(pgno) => u64_at(reader.page(pgno)?, PAGE_HEADER),
            _ => u64_at(value, 0),
        }
        .unwrap_or(0);
        Ok(())
    })?;
    Ok((pages, listed))
}

/// A named database's pages, the sub-trees of its duplicate values included.
fn named_database(reader: &mut Reader, db: DbRecord) -> Result<Pages, CensusError> {
    let mut pages = Pages::default();
    let mut subtrees = Vec::new();
    walk(reader, db.root, &mut pages, &mut |_, node, _| {
        if let Leaf::SubTree { record, .. } = node {
            subtrees.push(record);
        }
        Ok(())
    })?;
    // Duplicate values of a key beyond a page live in a sub-tree of the same table.
    for sub in subtrees {
        walk(reader, sub.root, &mut pages, &mut |_, _, _| Ok(()))?;
    }
    Ok(pages)
}

/// Walk the tree at `root`, recording its pages and calling `leaf` for every leaf node with
/// its inline value.
fn walk(
    reader: &mut Reader,
    root: u64,
    pages: &mut Pages,
    leaf: &mut LeafVisitor<'_>,
) -> Result<(), CensusError> {
    if root == P_INVALID {
        return Ok(());
    }
    let mut stack = vec![root];
    while let Some(pgno) = stack.pop() {
        let page = reader.page(pgno)?.to_vec();
        let damaged = || CensusError::Format(format!("page {pgno} is damaged"));
        let flags = u16_at(&page, 10).ok_or_else(damaged)?;
        if u64_at(&page, 0) != Some(pgno) {
            return Err(CensusError::Format(format!(
                "page {pgno} carries another page number"
            )));
        }
        if flags & P_LEAF2 != 0 {
            pages.leaf.insert(pgno);
            continue;
        }
        let lower = u16_at(&page, 12).ok_or_else(damaged)? as usize;
        let count = lower.saturating_sub(PAGE_HEADER) / 2;
        if flags & P_BRANCH != 0 {
            pages.branch.insert(pgno);
        } else if flags & P_LEAF != 0 {
            pages.leaf.insert(pgno);
        } else {
            return Err(CensusError::Format(format!(
                "page {pgno} is neither branch nor leaf (flags {flags:#x})"
            )));
        }
        for i in 0..count {
            let at = u16_at(&page, PAGE_HEADER + 2 * i).ok_or_else(damaged)? as usize;
            let lo = u16_at(&page, at).ok_or_else(damaged)? as u64;
            let hi = u16_at(&page, at + 2).ok_or_else(damaged)? as u64;
            let node_flags = u16_at(&page, at + 4).ok_or_else(damaged)?;
            let ksize = u16_at(&page, at + 6).ok_or_else(damaged)? as usize;
            let key_at = at + 8;
            if flags & P_BRANCH != 0 {
                stack.push(lo | (hi << 16) | ((node_flags as u64) << 32));
                continue;
            }
            let dsize = (lo | (hi << 16)) as usize;
            let data_at = key_at + ksize;
            if node_flags & F_BIGDATA != 0 {
                let first = u64_at(&page, data_at).ok_or_else(damaged)?;
                let header = reader.page(first)?;
                if u16_at(header, 10).unwrap_or(0) & P_OVERFLOW == 0 {
                    return Err(CensusError::Format(format!(
                        "page {first} should be an overflow page"
                    )));
                }
                let run = u32::from_le_bytes(header[12..16].try_into().unwrap_or_default()) as u64;
                pages.overflow.extend(first..first + run.max(1));
                leaf(reader, Leaf::Overflow(first), &[])?;
            } else if node_flags & F_SUBDATA != 0 {
                let key = page.get(key_at..data_at).ok_or_else(damaged)?.to_vec();
                let record = page
                    .get(data_at..data_at + DB_RECORD)
                    .and_then(db_record)
                    .ok_or_else(damaged)?;
                leaf(reader, Leaf::SubTree { key, record }, &[])?;
            } else {
                let value = page.get(data_at..data_at + dsize).ok_or_else(damaged)?;
                leaf(reader, Leaf::Inline, value)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::Object;
    use crate::store::Store;

    /// LMDB's own invariant: every page up to the last one is a meta page, a page of some
    /// database, or listed free — exactly once. The census must account for all of them, and
    /// agree with LMDB's page statistics for each table.
    #[test]
    fn the_census_accounts_for_every_page_and_matches_lmdb_statistics() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let store = Store::create(&db).unwrap();
        // Small and large objects (large ones go to overflow pages), over many commits so
        // that pages are freed and reused.
        for i in 0..300u32 {
            let size = if i % 7 == 0 { 9000 } else { 300 };
            let o = Object::new(
                "world/test/v1",
                "test",
                vec![(i % 251) as u8; size + i as usize],
            );
            store.write(move |w| w.put_object(&o)).unwrap();
        }
        drop(store);
        let stats = lmdb_statistics(&db);
        let c = census(&db).unwrap();
        assert_eq!(c.page_size, 4096);
        assert_eq!(
            c.used() + c.free_listed + 2,
            c.last_pgno + 1,
            "every page is used, free-listed or a meta page"
        );
        let objects = &c.tables["object_rows"];
        assert!(
            !objects.overflow.is_empty(),
            "large objects use overflow pages"
        );
        for (name, (branch, leaf, overflow)) in stats {
            let p = &c.tables[&name];
            assert_eq!(
                (
                    p.branch.len() as u64,
                    p.leaf.len() as u64,
                    p.overflow.len() as u64
                ),
                (branch, leaf, overflow),
                "{name}"
            );
        }
    }

    /// (branch, leaf, overflow) pages of every named database, as LMDB counts them.
    fn lmdb_statistics(db: &Path) -> Vec<(String, (u64, u64, u64))> {
        use heed::types::{Bytes, DecodeIgnore, Str};
        // SAFETY: the store is closed; this is the only handle on the environment.
        let env = unsafe { heed::EnvOpenOptions::new().max_dbs(64).open(db).unwrap() };
        let rtxn = env.read_txn().unwrap();
        let mut out = Vec::new();
        env.open_databases_and_commit(rtxn, |dbo, rtxn| -> heed::Result<_> {
            let main = dbo
                .open_database::<Str, DecodeIgnore>(rtxn, None)?
                .expect("main database");
            let mut names = Vec::new();
            for item in main.iter(rtxn)? {
                names.push(item?.0.to_owned());
            }
            for name in names {
                let t = dbo
                    .open_database::<Bytes, DecodeIgnore>(rtxn, Some(&name))?
                    .expect("named database");
                let s = t.stat(rtxn)?;
                let pages = (
                    s.branch_pages as u64,
                    s.leaf_pages as u64,
                    s.overflow_pages as u64,
                );
                out.push((name, pages));
            }
            Ok(heed::CommitOrAbort::<_, ()>::Commit(()))
        })
        .unwrap();
        env.prepare_for_closing().wait();
        out
    }

    /// The census names exactly the pages a commit rewrote: the page numbers it counts as new
    /// are the pages whose bytes changed in the file (meta pages aside), and any page written
    /// back with the bytes an earlier snapshot held there.
    #[test]
    fn the_pages_a_census_counts_as_written_changed_or_were_written_back_as_before() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let store = Store::create(&db).unwrap();
        // Censuses of earlier snapshots: LMDB may reuse a page freed two commits back for the
        // same page of the same tree, rewriting the bytes it held (a branch whose children
        // moved back where they were). Such a page is written, but its bytes do not change.
        let mut history = Vec::new();
        for i in 0..1500u32 {
            let o = Object::new(
                "world/test/v1",
                "test",
                vec![(i % 251) as u8; 300 + i as usize % 700],
            );
            store.write(move |w| w.put_object(&o)).unwrap();
            if i >= 1496 {
                history.push(census(&db).unwrap());
            }
        }
        let (mut appended, mut reused) = (0, 0);
        for i in 0..12u32 {
            let before = census(&db).unwrap();
            let bytes_before = std::fs::read(db.join("data.mdb")).unwrap();
            // Every fourth object is large enough for overflow pages.
            let size = if i % 4 == 0 { 7000 } else { 333 + i as usize };
            let o = Object::new("world/test/v2", "test", vec![i as u8 + 1; size]);
            store.write(move |w| w.put_object(&o)).unwrap();
            let after = census(&db).unwrap();
            let bytes_after = std::fs::read(db.join("data.mdb")).unwrap();
            let page = after.page_size as usize;
            let changed: HashSet<u64> = (2..bytes_after.len() / page)
                .filter(|p| {
                    bytes_before.get(p * page..(p + 1) * page)
                        != bytes_after.get(p * page..(p + 1) * page)
                })
                .map(|p| p as u64)
                .collect();
            let (now, then) = (after.all_pages(), before.all_pages());
            let new: HashSet<u64> = now.difference(&then).copied().collect();
            assert!(changed.is_subset(&new), "commit {i}: {changed:?} {new:?}");
            for p in new.difference(&changed) {
                let held = owner(&after, *p);
                assert!(
                    held.is_some() && history.iter().any(|c| owner(c, *p) == held),
                    "commit {i}: page {p} of {held:?} is counted as written, but neither its \
                     bytes changed nor did an earlier snapshot hold it there"
                );
            }
            let counted: u64 = after
                .written_since(&before)
                .values()
                .map(PageCount::total)
                .sum();
            assert_eq!(counted, new.len() as u64, "commit {i}");
            let mut sorted: Vec<u64> = new.iter().copied().collect();
            sorted.sort_unstable();
            let runs = 1 + sorted.windows(2).filter(|w| w[1] > w[0] + 1).count() as u64;
            assert_eq!(
                after.runs_since(&before),
                (new.len() as u64, runs),
                "commit {i}"
            );
            // Told apart by the file itself: a page past the end of the file as it was before
            // the commit grew it; any other was in the file already, freed and reused.
            let old_end = (bytes_before.len() / page) as u64;
            let (grew, kept): (Vec<u64>, Vec<u64>) = sorted.iter().partition(|p| **p >= old_end);
            let placed = after.placement_since(&before);
            assert_eq!(placed.appended, Runs::of(&grew), "commit {i}");
            assert_eq!(placed.reused, Runs::of(&kept), "commit {i}");
            appended += placed.appended.pages;
            reused += placed.reused.pages;
            let by_table: Vec<u64> = after
                .new_pages_since(&before)
                .into_values()
                .flatten()
                .collect();
            assert_eq!(
                by_table.iter().copied().collect::<HashSet<u64>>(),
                new,
                "commit {i}"
            );
            assert_eq!(
                by_table.len(),
                new.len(),
                "commit {i}: a page in two tables"
            );
            let written = after.written_since(&before);
            assert!(
                written.contains_key("object_rows") && written.contains_key(MAIN),
                "{written:?}"
            );
            assert!(
                !written.contains_key("log"),
                "the log was not touched: {written:?}"
            );
            assert_eq!(after.txnid, before.txnid + 1);
            history.push(after);
        }
        assert!(
            appended > 0 && reused > 0,
            "the commits grew the file and reused freed pages: {appended} and {reused} pages"
        );
    }

    /// The table and kind of page `p` in `census`.
    fn owner(census: &Census, p: u64) -> Option<(String, &'static str)> {
        census.tables.iter().find_map(|(name, pages)| {
            let kind = if pages.branch.contains(&p) {
                "branch"
            } else if pages.leaf.contains(&p) {
                "leaf"
            } else if pages.overflow.contains(&p) {
                "overflow"
            } else {
                return None;
            };
            Some((name.clone(), kind))
        })
    }

    #[test]
    fn runs_count_consecutive_page_numbers_and_lone_pages() {
        assert_eq!(Runs::of(&[]), Runs::default());
        let r = |pages, runs, lone| Runs { pages, runs, lone };
        assert_eq!(Runs::of(&[7]), r(1, 1, 1));
        assert_eq!(Runs::of(&[3, 4, 5]), r(3, 1, 0));
        assert_eq!(Runs::of(&[1, 3, 4, 9, 11, 12, 13]), r(7, 4, 2));
        let mut total = Runs::of(&[1, 2]);
        total.add(Runs::of(&[5]));
        assert_eq!(total, r(3, 2, 1));
    }

    #[test]
    fn a_file_that_is_not_lmdb_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("data.mdb"), vec![0u8; 8192]).unwrap();
        assert!(matches!(census(dir.path()), Err(CensusError::Format(_))));
        let missing = census(&dir.path().join("nowhere")).unwrap_err();
        assert!(missing.to_string().starts_with("cannot read "), "{missing}");
    }
}
