import Foundation
import Logging
import SetteeCore
import Synchronization

/// The views of one bucket on this node: its design documents (persisted beside the bucket's data)
/// and one `DesignIndex` per design document that has views.
public final class BucketViews: Sendable {
    public let bucket: String
    public let directory: String
    let source: any ViewDataSource
    let logger: Logger
    private let state: Mutex<[String: (doc: DesignDocument, index: DesignIndex?)]>
    /// Serialises design-document changes (file write + index swap).
    private let changes = Mutex<Void>(())

    /// Opens `directory` (created if needed), loads the design documents and starts their indexes,
    /// which resume from their stored seqnos.
    public init(bucket: String, directory: String, source: any ViewDataSource, logger: Logger) throws(ViewError) {
        self.bucket = bucket
        self.directory = directory
        self.source = source
        self.logger = logger
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw .storage("create \(directory): \(error)")
        }
        var all: [String: (doc: DesignDocument, index: DesignIndex?)] = [:]
        for doc in try DesignDocumentFile.load(directory: directory) {
            let index =
                doc.views.isEmpty
                ? nil : try DesignIndex(design: doc, directory: directory, source: source, logger: logger)
            all[doc.name] = (doc, index)
        }
        state = Mutex(all)
    }

    public var designDocuments: [DesignDocument] { state.withLock { $0.values.map(\.doc) } }

    public func designDocument(named name: String) -> DesignDocument? { state.withLock { $0[name]?.doc } }

    public func index(named name: String) -> DesignIndex? { state.withLock { $0[name]?.index } }

    /// Creates or replaces a design document. Its JavaScript must compile. A change of any function
    /// rebuilds the design document's index from scratch; an identical PUT keeps it. Blocking.
    public func put(_ doc: DesignDocument) throws(ViewError) {
        try changes.withLock { _ throws(ViewError) in
            let old = state.withLock { $0[doc.name] }
            if let old, old.doc.signature == doc.signature, (old.index != nil) == !doc.views.isEmpty {
                try persist { $0[doc.name] = (doc, old.index) }
                return
            }
            let index =
                doc.views.isEmpty
                ? nil : try DesignIndex(design: doc, directory: directory, source: source, logger: logger)
            do throws(ViewError) {
                try persist { $0[doc.name] = (doc, index) }
            } catch {
                index?.destroy()
                throw error
            }
            old?.index?.destroy()
            logger.info("design document stored", metadata: ["bucket": "\(bucket)", "ddoc": "\(doc.name)"])
        }
    }

    /// Deletes a design document and its index. Throws `.notFound` when absent.
    public func delete(named name: String) throws(ViewError) {
        try changes.withLock { _ throws(ViewError) in
            guard let old = state.withLock({ $0[name] }) else { throw .notFound("missing") }
            try persist { $0[name] = nil }
            old.index?.destroy()
        }
    }

    private func persist(_ change: (inout [String: (doc: DesignDocument, index: DesignIndex?)]) -> Void)
        throws(ViewError)
    {
        var next = state.withLock { $0 }
        change(&next)
        let docs = next.values.map(\.doc).sorted { $0.name < $1.name }
        guard docs.count <= Limits.maxDesignDocumentsPerBucket else {
            throw .badRequest("too many design documents (limit \(Limits.maxDesignDocumentsPerBucket))")
        }
        try DesignDocumentFile.save(docs, directory: directory)
        state.withLock { $0 = next }
    }

    /// The names of the design documents that have an index, sorted (the files a compaction visits, ADR 0154).
    public var indexedDesignDocuments: [String] {
        state.withLock { s in s.compactMap { $0.value.index == nil ? nil : $0.key } }.sorted()
    }

    /// Every index file's figures summed (`couch_views_*`, ADR 0154). Blocking: off event loops.
    public func diskFigures() -> DiskFigures {
        let indexes = state.withLock { $0.values.compactMap(\.index) }
        return indexes.reduce(DiskFigures()) { $0 + ($1.diskFigures() ?? DiskFigures()) }
    }

    /// Stops every index worker (shutdown or bucket deletion).
    public func stop() {
        let indexes = state.withLock { $0.values.compactMap(\.index) }
        for i in indexes { i.stop() }
    }
}
