import SetteeJSON
import Synchronization

/// What the gateway imports of a body a KV client wrote (Sync Gateway's `validateImportBody`, db/import.go).
enum ImportRules {
    /// The first top-level member of `body` that no application document may have: any name starting with `_`
    /// (CouchDB's `_id`, `_rev`, `_deleted`, `_revisions`, `_attachments`, Sync Gateway's `_exp`, `_sync`,
    /// `_purged`, ...). A REST client cannot write one either (`DocumentBody`: 400), and a replica would take it
    /// for the document's own metadata (a CouchDB export's `_id` made it a conflicting revision of another
    /// document on a PouchDB replica, and one such document aborted every one-shot pull of its channel).
    /// `gatewayStubs`: the 1.x layout with the gateway's `_sync` still in the item, where `_attachments` holds the
    /// gateway's own stubs (an SDK sub-document edit keeps them), so it is allowed. Nil when the body may be imported.
    static func reservedMember(in body: [(String, JSON)], gatewayStubs: Bool) -> String? {
        for (name, _) in body where name.hasPrefix("_") {
            if gatewayStubs && name == "_attachments" { continue }
            return name
        }
        return nil
    }
}

/// Counts of a database's imports since it opened, in Sync Gateway's `shared_bucket_import` stats group
/// (`import_count`, `import_error_count`), shown by `/_expvar` and `/_metrics`.
final class ImportStats: Sendable {
    private let importedCount = Atomic<Int>(0)
    private let refusedCount = Atomic<Int>(0)
    private let filteredCount = Atomic<Int>(0)

    /// A KV client's write became a revision.
    func imported() { importedCount.add(1, ordering: .relaxed) }
    /// A KV client's write was refused (reserved members, too deep, not JSON): logged, the item left as it is.
    func refused() { refusedCount.add(1, ordering: .relaxed) }
    /// The `import_filter` did not accept a KV client's write (or deletion): the item left as it is.
    func filtered() { filteredCount.add(1, ordering: .relaxed) }

    var importCount: Int { importedCount.load(ordering: .relaxed) }
    var importErrorCount: Int { refusedCount.load(ordering: .relaxed) }
    var importFilteredCount: Int { filteredCount.load(ordering: .relaxed) }
}
