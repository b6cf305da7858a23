import SetteeJSON
import Synchronization

/// One keyspace's figures since its database opened, in Sync Gateway 3.1's per-collection stats group
/// (`syncgateway.per_db.<db>.per_collection.<scope>.<collection>` in `/_expvar`, `sgw_collection_*` with a
/// `collection` label in its Prometheus output; base/stats.go `CollectionStats`):
///
///     sync_function_count            sync function runs (documents written, imported or resynced)
///     sync_function_time             nanoseconds spent in them, as measured around each run
///     sync_function_reject_count     runs that refused the revision (`throw({forbidden})`, `require*`, a bad
///                                    channel name: a 4xx)
///     sync_function_exception_count  runs that failed (an exception, a timeout: a 5xx)
///     import_count                   KV writes imported (the keyspace's `ImportStats.importCount`)
///     num_doc_reads, doc_reads_bytes     revisions rendered for a client (REST, `_bulk_get`, BLIP `rev`) and
///                                        the stored body bytes of each
///     num_doc_writes, doc_writes_bytes   revisions clients wrote (REST, `_bulk_docs`, BLIP push) and their stored
///                                        body bytes
///
/// Sync Gateway's `sync_function_reject_access_count` (refusals by `require*` alone) is not kept: the sync function
/// answers both kinds of refusal with the same 403 (ADR 0152).
final class CollectionStats: Sendable {
    private let syncRuns = Atomic<Int>(0)
    private let syncNanoseconds = Atomic<Int>(0)
    private let syncRejects = Atomic<Int>(0)
    private let syncExceptions = Atomic<Int>(0)
    private let reads = Atomic<Int>(0)
    private let readBytes = Atomic<Int>(0)
    private let writes = Atomic<Int>(0)
    private let writeBytes = Atomic<Int>(0)

    /// A sync function run that took `duration`; `status` is the HTTP status of its refusal (nil: accepted).
    func syncRan(_ duration: Duration, refusal status: Int?) {
        syncRuns.add(1, ordering: .relaxed)
        let (s, atto) = duration.components
        let ns = s.multipliedReportingOverflow(by: 1_000_000_000)
        let nanos = ns.overflow ? Int64.max : ns.partialValue.addingReportingOverflow(atto / 1_000_000_000).partialValue
        syncNanoseconds.add(Int(clamping: max(0, nanos)), ordering: .relaxed)
        guard let status else { return }
        if status >= 500 {
            syncExceptions.add(1, ordering: .relaxed)
        } else {
            syncRejects.add(1, ordering: .relaxed)
        }
    }

    /// A revision rendered for a client, `bytes` of stored body.
    func read(bytes: Int) {
        reads.add(1, ordering: .relaxed)
        readBytes.add(bytes, ordering: .relaxed)
    }

    /// A revision a client wrote, `bytes` of stored body.
    func wrote(bytes: Int) {
        writes.add(1, ordering: .relaxed)
        writeBytes.add(bytes, ordering: .relaxed)
    }

    var syncFunctionCount: Int { syncRuns.load(ordering: .relaxed) }
    var syncFunctionTimeNanoseconds: Int { syncNanoseconds.load(ordering: .relaxed) }
    var syncFunctionRejectCount: Int { syncRejects.load(ordering: .relaxed) }
    var syncFunctionExceptionCount: Int { syncExceptions.load(ordering: .relaxed) }
    var numDocReads: Int { reads.load(ordering: .relaxed) }
    var docReadsBytes: Int { readBytes.load(ordering: .relaxed) }
    var numDocWrites: Int { writes.load(ordering: .relaxed) }
    var docWritesBytes: Int { writeBytes.load(ordering: .relaxed) }

    /// The figures by Sync Gateway's names, `import_count` being `imports` (kept by `ImportStats`), in the order
    /// both `/_expvar` and `/_metrics` show them (every one only grows: Prometheus counters).
    func figures(imports: Int) -> [(name: String, help: String, value: Int)] {
        [
            ("sync_function_count", "Sync function runs in this collection", syncFunctionCount),
            (
                "sync_function_time", "Nanoseconds spent running this collection's sync function",
                syncFunctionTimeNanoseconds
            ),
            (
                "sync_function_reject_count", "Revisions this collection's sync function refused",
                syncFunctionRejectCount
            ),
            (
                "sync_function_exception_count", "Runs of this collection's sync function that failed",
                syncFunctionExceptionCount
            ),
            ("import_count", "KV writes imported into this collection", imports),
            ("num_doc_reads", "Revisions of this collection sent to clients", numDocReads),
            (
                "doc_reads_bytes", "Stored body bytes of the revisions of this collection sent to clients",
                docReadsBytes
            ),
            ("num_doc_writes", "Revisions clients wrote to this collection", numDocWrites),
            (
                "doc_writes_bytes", "Stored body bytes of the revisions clients wrote to this collection",
                docWritesBytes
            ),
        ]
    }
}

/// The keyspace's sync function with its runs counted and timed in `CollectionStats` (a decorator, so every caller
/// of `GatewayDatabase.sync`, writes, imports and `_resync` alike, is counted in one place).
struct CountedSyncRunner: SyncRunner {
    let inner: any SyncRunner
    let stats: CollectionStats

    func run(doc: JSON, oldDoc: JSON?, user: UserContext?) async throws(GatewayError) -> SyncResult {
        let clock = ContinuousClock()
        let start = clock.now
        do {
            let result = try await inner.run(doc: doc, oldDoc: oldDoc, user: user)
            stats.syncRan(clock.now - start, refusal: nil)
            return result
        } catch {
            stats.syncRan(clock.now - start, refusal: error.status)
            throw error
        }
    }
}
