/// The SQLite tables that hold one collection (docs/adr/0150). `_default._default` keeps the tables every
/// earlier schema version had (`docs`, `revs`, `views`, `view_rows`, `fts_indexes`, `fts`), so a file
/// upgraded to collections moves no row; collection `id` N > 0 has the same tables named `cN_docs`, ...
/// Attachments (by digest), `_local` documents and `meta` are the database's, shared by its collections.
struct CollectionTables: Sendable, Equatable, Hashable {
    /// The `collections.id` of the collection (0: `_default._default`).
    let id: Int64
    let docs: String
    let revs: String
    let views: String
    let viewRows: String
    let ftsIndexes: String
    let fts: String

    init(id: Int64) {
        self.id = id
        let prefix = id == 0 ? "" : "c\(id)_"
        docs = prefix + "docs"
        revs = prefix + "revs"
        views = prefix + "views"
        viewRows = prefix + "view_rows"
        ftsIndexes = prefix + "fts_indexes"
        fts = prefix + "fts"
    }

    static let `default` = CollectionTables(id: 0)

    /// The statements that create a collection's tables (those of `_default._default` are in `Schema.ddl`).
    var ddl: [String] {
        [
            "CREATE TABLE IF NOT EXISTS \(docs) (\(Schema.docsColumns))",
            """
            CREATE TABLE IF NOT EXISTS \(revs) (doc_id INTEGER NOT NULL, rev TEXT NOT NULL, body BLOB NOT NULL,
                PRIMARY KEY (doc_id, rev)) WITHOUT ROWID
            """,
            """
            CREATE TABLE IF NOT EXISTS \(views) (view_id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,
                version TEXT NOT NULL, last_seq INTEGER NOT NULL)
            """,
            """
            CREATE TABLE IF NOT EXISTS \(viewRows) (view_id INTEGER NOT NULL, sk BLOB NOT NULL, doc TEXT NOT NULL,
                n INTEGER NOT NULL, key BLOB NOT NULL, value BLOB NOT NULL)
            """,
            "CREATE INDEX IF NOT EXISTS \(viewRows)_by_key ON \(viewRows)(view_id, sk, doc, n)",
            "CREATE INDEX IF NOT EXISTS \(viewRows)_by_doc ON \(viewRows)(view_id, doc)",
            """
            CREATE TABLE IF NOT EXISTS \(ftsIndexes) (idx_id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,
                properties TEXT NOT NULL, last_seq INTEGER NOT NULL)
            """,
            "CREATE VIRTUAL TABLE IF NOT EXISTS \(fts) USING \(Schema.ftsModule)",
        ]
    }

    /// The statements that drop a collection's tables (their indexes go with them).
    var drop: [String] {
        [docs, revs, views, viewRows, ftsIndexes, fts].map { "DROP TABLE IF EXISTS \($0)" }
    }
}
