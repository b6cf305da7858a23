/// The SQLite schema of one Lite database file (see docs/adr/0014 and docs/internals/lite.md).
///
/// Invariants:
/// 1. `docs.seq` is unique and equals the sequence of the document's last change. The last sequence is
///    `max(meta.last_seq, max(docs.seq))`: `meta.last_seq` is written only by a transaction that takes a
///    sequence no row keeps (a purge), so a save writes no `meta` page. Purged documents leave gaps; a
///    sequence is never reused.
/// 2. Every revision in a document's tree that still has a body has it in exactly one place: the winner's
///    in `docs.body`, every other one in a `revs` row. `docs.tree` is the tree's storage form without
///    bodies. (Version 1 kept the winner's body in `revs` too; `migration(from:)` moves it, see docs/adr/0041.)
/// 3. `docs.winner`/`docs.deleted` are the tree's winner and its deleted flag.
/// 4. An `attachments` row exists for every digest named by a kept revision body; rows nobody names are
///    dropped by compaction only (so a purge or a new revision never races a reader of the old one).
/// 5. Index tables (`view_rows`, `fts`) describe documents up to their `last_seq`; they are brought up
///    to date before each query, inside the writer's lock.
enum Schema {
    /// 2: the winner's body moved from `revs` into `docs.body` (a new document is one row write).
    static let version: Int64 = 2

    static let ddl = """
        CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS docs (
            doc_id INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            seq INTEGER NOT NULL,
            winner TEXT NOT NULL,
            deleted INTEGER NOT NULL,
            type TEXT,
            tree BLOB NOT NULL,
            body BLOB
        );
        CREATE UNIQUE INDEX IF NOT EXISTS docs_by_seq ON docs(seq);
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
        CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(body, tokenize = 'unicode61 remove_diacritics 2');
        """

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
        default:
            return nil
        }
    }
}
