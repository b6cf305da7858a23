/// The SQLite schema of one Lite database file (see docs/adr/0014 and docs/internals/lite.md).
///
/// Invariants:
/// 1. `docs.seq` is unique and equals the sequence of the document's last change; it is the row id, so a
///    change moves the row to the end of the table and no separate sequence index exists (version 3, ADR
///    0043). The last sequence is `max(meta.last_seq, max(docs.seq))`: `meta.last_seq` is written only by a
///    transaction that takes a sequence no row keeps (a purge), so a save writes no `meta` page. Purged
///    documents leave gaps; a sequence is never reused.
/// 1a. `docs.doc_id` is the document's stable number (the key of its `revs` rows and of its `fts` row ids):
///    the sequence that created the row, so it is unique without an index, and greater than every `doc_id`
///    a version-2 file kept (the migration makes the last sequence at least their maximum).
/// 2. Every revision in a document's tree that still has a body has it in exactly one place: the winner's
///    in `docs.body`, every other one in a `revs` row. `docs.tree` is the tree's storage form without
///    bodies, or empty when the tree is the one revision `winner` (version 4, ADR 0052). (Version 1 kept the
///    winner's body in `revs` too; `migration(from:)` moves it, see docs/adr/0041.)
/// 3. `docs.winner`/`docs.deleted` are the tree's winner and its deleted flag.
/// 4. An `attachments` row exists for every digest named by a kept revision body; rows nobody names are
///    dropped by compaction only (so a purge or a new revision never races a reader of the old one).
/// 5. Index tables (`view_rows`, `fts`) describe documents up to their `last_seq`; they are brought up
///    to date before each query, inside the writer's lock.
/// 6. (Version 5, ADR 0150) Every collection is a `collections` row; `_default._default` is row 0 and owns the
///    tables above, collection N > 0 the same tables prefixed `cN_` (`CollectionTables`). Sequences are the
///    database's, shared by its collections: invariant 1's last sequence is the maximum over every collection's
///    `docs` and `meta.last_seq`, and dropping a collection records the last sequence in `meta` first.
/// 7. (Version 6, ADR 0153) An `expirations` row (collection id, document id, milliseconds since 1970) exists only
///    for a document row of that collection: a purge (by hand or by expiry) and a collection drop delete its rows in
///    the same transaction. A save or deletion keeps it (Couchbase Lite's expiration outlives edits).
enum Schema {
    /// 2: the winner's body moved from `revs` into `docs.body` (a new document is one row write).
    /// 3: `docs.seq` is the row id (no `docs_by_seq` index); `fts` rows carry the document id (ADR 0043).
    /// 4: `docs.tree` is empty for a tree of one revision, described by `winner` and `deleted` (ADR 0052);
    ///    version-3 rows keep their full trees, which still decode, so the upgrade rewrites nothing.
    /// 5: the `collections` table (ADR 0150); the existing documents are `_default._default`, row 0, in
    ///    the tables they were in, so the upgrade writes one row.
    /// 6: the `expirations` table and its index by time (ADR 0153), empty in an upgraded file.
    static let version: Int64 = 6

    /// `_default._default`'s row, written by a new file and by the upgrade to version 5.
    static let defaultCollectionRow =
        "INSERT OR IGNORE INTO collections (id, scope, name) VALUES (0, '_default', '_default')"

    static let ddl = """
        CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS docs (\(docsColumns));
        CREATE TABLE IF NOT EXISTS revs (
            doc_id INTEGER NOT NULL,
            rev TEXT NOT NULL,
            body BLOB NOT NULL,
            PRIMARY KEY (doc_id, rev)
        ) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS attachments (
            digest TEXT PRIMARY KEY,
            length INTEGER NOT NULL,
            data BLOB NOT NULL
        );
        CREATE TABLE IF NOT EXISTS local_docs (id TEXT PRIMARY KEY, rev TEXT NOT NULL, body BLOB NOT NULL)
            WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS views (
            view_id INTEGER PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            version TEXT NOT NULL,
            last_seq INTEGER NOT NULL
        );
        CREATE TABLE IF NOT EXISTS view_rows (
            view_id INTEGER NOT NULL,
            sk BLOB NOT NULL,
            doc TEXT NOT NULL,
            n INTEGER NOT NULL,
            key BLOB NOT NULL,
            value BLOB NOT NULL
        );
        CREATE INDEX IF NOT EXISTS view_rows_by_key ON view_rows(view_id, sk, doc, n);
        CREATE INDEX IF NOT EXISTS view_rows_by_doc ON view_rows(view_id, doc);
        CREATE TABLE IF NOT EXISTS fts_indexes (
            idx_id INTEGER PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            properties TEXT NOT NULL,
            last_seq INTEGER NOT NULL
        );
        CREATE VIRTUAL TABLE IF NOT EXISTS fts USING \(ftsModule);
        CREATE TABLE IF NOT EXISTS collections (
            id INTEGER PRIMARY KEY,
            scope TEXT NOT NULL,
            name TEXT NOT NULL,
            UNIQUE (scope, name)
        );
        \(expirationsDDL)
        """

    /// Document expirations (version 6, ADR 0153), the database's for every collection; the index finds the earliest
    /// one and the due ones without a scan.
    static let expirationsDDL = """
        CREATE TABLE IF NOT EXISTS expirations (
            collection INTEGER NOT NULL,
            id TEXT NOT NULL,
            expires INTEGER NOT NULL,
            PRIMARY KEY (collection, id)
        ) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS expirations_by_time ON expirations(expires);
        """

    /// The document table's columns (version 3): the sequence is the row id, so a new document is one
    /// table append plus its `id` index entry, the two b-tree writes a plain keyed table makes.
    static let docsColumns = """
        seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, doc_id INTEGER NOT NULL, winner TEXT NOT NULL, \
        deleted INTEGER NOT NULL, type TEXT, tree BLOB NOT NULL, body BLOB
        """

    /// Full-text rows: the indexed text and, unindexed, the document id a hit reports (no join to `docs`).
    static let ftsModule = "fts5(body, doc UNINDEXED, tokenize = 'unicode61 remove_diacritics 2')"

    /// The statements that bring a file of version `from` to `from + 1`, run in one write transaction
    /// together with the new `schema_version` (so a crash leaves the old version whole). Nil for a
    /// version this code cannot upgrade.
    static func migration(from version: Int64) -> [String]? {
        switch version {
        case 1:
            // The winner's body moves from `revs` into the document row; nothing else changes.
            return [
                "ALTER TABLE docs ADD COLUMN body BLOB",
                """
                UPDATE docs SET body = (SELECT r.body FROM revs r WHERE r.doc_id = docs.doc_id AND r.rev = docs.winner)
                """,
                """
                DELETE FROM revs WHERE EXISTS
                    (SELECT 1 FROM docs d WHERE d.doc_id = revs.doc_id AND d.winner = revs.rev AND d.body IS NOT NULL)
                """,
            ]
        case 2:
            // The sequence becomes the row id and `docs_by_seq` goes (ADR 0043). Row ids of version 2 stay
            // as `doc_id` (the key of `revs` rows); new documents take their creation sequence as `doc_id`,
            // so the last sequence is raised to at least the largest kept one (a no-op in any file version 2
            // wrote: a row id never exceeded the sequences taken before it). Full-text indexes are rebuilt
            // from the documents at their next search, with the document id in each row.
            return [
                "CREATE TABLE docs_v3 (\(docsColumns))",
                """
                INSERT INTO docs_v3 (seq, id, doc_id, winner, deleted, type, tree, body)
                    SELECT seq, id, doc_id, winner, deleted, type, tree, body FROM docs
                """,
                "DROP TABLE docs",
                "ALTER TABLE docs_v3 RENAME TO docs",
                """
                INSERT OR REPLACE INTO meta (key, value) SELECT 'last_seq',
                    max(coalesce((SELECT value FROM meta WHERE key = 'last_seq'), 0), coalesce(max(doc_id), 0))
                    FROM docs
                """,
                "DROP TABLE IF EXISTS fts",
                "CREATE VIRTUAL TABLE fts USING \(ftsModule)",
                "UPDATE fts_indexes SET last_seq = 0",
            ]
        case 3:
            // Full trees of one revision stay valid; only trees written from now on are elided.
            return []
        case 4:
            // The documents stay where they are, as `_default._default` (the `collections` table is in `ddl`).
            return [defaultCollectionRow]
        case 5:
            // No document expires yet; the table is made here as well as by `ddl` so the step says what it adds.
            return [expirationsDDL]
        default:
            return nil
        }
    }
}
