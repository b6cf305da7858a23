import Foundation
import Logging
import SetteeClient
import SetteeCore

/// What a restore does with a key the target bucket already holds (`cbbackupmgr restore`'s conflict choices).
public enum ConflictPolicy: String, Sendable, CaseIterable {
    /// Leave the target's document (a missing key is written).
    case skip
    /// The backup's version replaces the target's.
    case overwrite
    /// The higher CAS wins (the "newer CAS wins"; last write wins, as a bucket with `lww` conflict
    /// resolution decides): the backup's version is written where the target has no version of the key (document
    /// or tombstone) or an older one by CAS, and the target's is kept otherwise. The target's CAS is read with
    /// GET_META and the write is guarded by it, so a version written meanwhile is compared again, never overwritten
    /// unseen.
    case newer
}

/// Where a backup's collections go: `source bucket=target bucket` and `bucket.scope.collection=bucket.scope.collection`
/// (`cbbackupmgr --map-data`).
public struct DataMapping: Sendable, Equatable {
    public var buckets: [String: String] = [:]
    public var collections: [String: (scope: String, name: String)] = [:]
    public init() {}

    public static func == (a: DataMapping, b: DataMapping) -> Bool {
        a.buckets == b.buckets
            && a.collections.mapValues { "\($0.scope).\($0.name)" }
                == b.collections.mapValues { "\($0.scope).\($0.name)" }
    }

    /// Parses `old=new[,old=new…]`; throws naming the bad pair.
    public static func parse(_ text: String) throws -> DataMapping {
        var m = DataMapping()
        for pair in text.split(separator: ",") {
            let kv = pair.split(separator: "=", omittingEmptySubsequences: false)
            guard kv.count == 2 else { throw BackupError("--map-data: \(pair) is not old=new") }
            let from = kv[0].split(separator: ".", omittingEmptySubsequences: false).map(String.init)
            let to = kv[1].split(separator: ".", omittingEmptySubsequences: false).map(String.init)
            guard from.count == to.count, !from.contains(where: \.isEmpty), !to.contains(where: \.isEmpty) else {
                throw BackupError(
                    "--map-data: \(pair) must map bucket=bucket or bucket.scope.collection=bucket.scope.collection")
            }
            switch from.count {
            case 1: m.buckets[from[0]] = to[0]
            case 3:
                m.buckets[from[0]] = m.buckets[from[0]] ?? to[0]
                m.collections["\(from[1]).\(from[2])"] = (to[1], to[2])
            default: throw BackupError("--map-data: \(pair): bucket or bucket.scope.collection expected")
            }
        }
        return m
    }

    public func bucket(_ source: String) -> String { buckets[source] ?? source }
    public func collection(_ c: BackupCollection) -> (scope: String, name: String) {
        collections[c.path] ?? (c.scope, c.name)
    }
}

/// The counts a restore reports.
public struct RestoreSummary: Sendable, Equatable {
    public var written = 0
    public var deleted = 0
    public var skipped = 0
    public var filtered = 0
    public var expired = 0
    public var bytes: UInt64 = 0
    public var seconds = 0.0
    public init() {}
}

/// The state a chain of backups leaves each key of one (collection, vBucket) in: the last change of each key, from
/// the last segment marked `restarted` on (an earlier segment belongs to a history the vBucket lost). Pure.
public enum ChainMerge {
    /// `segments` oldest first; each is (restarted, its records in seqno order).
    public static func merge(_ segments: [(restarted: Bool, events: [ChangeEvent])]) -> [ChangeEvent] {
        let from = segments.lastIndex(where: { $0.restarted }) ?? 0
        var last: [[UInt8]: ChangeEvent] = [:]
        var order: [[UInt8]] = []
        for s in segments[from...] {
            for e in s.events {
                if last.updateValue(e, forKey: e.key) == nil { order.append(e.key) }
            }
        }
        return order.compactMap { last[$0] }
    }
}

/// Restores a chain of backups into a bucket through the smart client (ADR 0147): per collection and vBucket the
/// chain's segments are read (each verified whole before anything of it is written), merged (`ChainMerge`), filtered
/// by key and written by the conflict policy. Documents are stored with their value, flags, expiry, datatype and
/// XATTRs and keep their CAS and revSeqno (SET_WITH_META / ADD_WITH_META); a deletion becomes a tombstone with its
/// CAS (DEL_WITH_META). The restoring user needs write and manage on the bucket.
public struct RestoreRunner: Sendable {
    public let repository: BackupRepository
    public let options: ClientOptions
    public let logger: Logger

    public init(repository: BackupRepository, options: ClientOptions, logger: Logger) {
        self.repository = repository
        self.options = options
        self.logger = logger
    }

    /// Restores `chain` (oldest first, `BackupRepository.chain`) into `options.bucket`.
    public func run(
        chain: [BackupManifest], mapping: DataMapping, filter: Regex<AnyRegexOutput>?, policy: ConflictPolicy,
        progress: @escaping @Sendable (TransferProgress) -> Void = { _ in }
    ) async throws -> RestoreSummary {
        guard let last = chain.last else { throw BackupError("nothing to restore") }
        let started = Date()
        var clientOptions = options
        clientOptions.collections = last.collections.contains { c in
            let t = mapping.collection(c)
            return t.scope != "_default" || t.name != "_default"
        }
        let client = try await BucketClient.connect(clientOptions, logger: logger)
        do {
            let summary = try await restore(
                chain: chain, last: last, client: client, mapping: mapping, filter: filter,
                policy: policy, started: started, progress: progress)
            await client.close()
            return summary
        } catch {
            await client.close()
            throw error
        }
    }

    func restore(
        chain: [BackupManifest], last: BackupManifest, client: BucketClient, mapping: DataMapping,
        filter: Regex<AnyRegexOutput>?, policy: ConflictPolicy, started: Date,
        progress: @escaping @Sendable (TransferProgress) -> Void
    ) async throws -> RestoreSummary {
        var summary = RestoreSummary()
        var total = TransferProgress()
        let repo = repository
        for c in last.collections {
            let target = mapping.collection(c)
            let handle = client.collection(target.scope, target.name)
            total.collection = "\(c.path) -> \(target.scope).\(target.name)"
            total.vbucketsTotal = last.vbuckets
            total.vbucketsDone = 0
            for vbIndex in 0..<last.vbuckets {
                let vb = VBucketID(UInt16(vbIndex))
                let urls: [(Bool, URL)] = chain.compactMap { m in
                    guard m.collections.contains(where: { $0.id == c.id }),
                        let s = m.segments[c.id]?.first(where: { $0.vbucket == vb })
                    else { return nil }
                    return (s.restarted, repo.segmentURL(m.bucket, m.name, c, vb))
                }
                let segments: [(restarted: Bool, events: [ChangeEvent])] = try await blocking {
                    try urls.map { (restarted, url) in
                        var events: [ChangeEvent] = []
                        _ = try repo.readSegment(url) { events += $0 }
                        return (restarted, events)
                    }
                }
                let merged = ChainMerge.merge(segments)
                try await withThrowingTaskGroup(of: Outcome.self) { group in
                    var inFlight = 0
                    for e in merged {
                        // The filter reads the key as text (a byte that is not UTF-8 matches as U+FFFD); the write
                        // uses the exact bytes the backup streamed, never a text rewritten from them.
                        if let filter, (try? filter.wholeMatch(in: String(decoding: e.key, as: UTF8.self))) == nil {
                            summary.filtered += 1
                            continue
                        }
                        if inFlight >= Limits.restoreWritesInFlight, let o = try await group.next() {
                            inFlight -= 1
                            summary.add(o)
                        }
                        inFlight += 1
                        group.addTask { try await Self.apply(e, handle: handle, policy: policy) }
                    }
                    while let o = try await group.next() { summary.add(o) }
                }
                total.vbucketsDone += 1
                total.items = UInt64(summary.written + summary.deleted)
                summary.bytes = total.bytes
                total.bytes += UInt64(merged.reduce(0) { $0 + $1.key.count + $1.value.count })
                progress(total)
            }
        }
        summary.bytes = total.bytes
        summary.seconds = Date().timeIntervalSince(started)
        return summary
    }

    /// `ConflictPolicy.newer` for one key: compare CAS with the target's version, write guarded by its CAS; a
    /// version written meanwhile (CAS mismatch, or a document where there was none) is read and compared again, up
    /// to `Limits.restoreConflictRereads` times (then the restore fails naming the key: it never guesses).
    static func newerWins(
        _ e: ChangeEvent, key: [UInt8], meta: DocumentMeta, deleted: Bool, handle: CollectionHandle
    ) async throws -> Outcome {
        for _ in 0...Limits.restoreConflictRereads {
            let target = try await handle.getMeta(key)
            if let target, target.meta.cas >= meta.cas { return .skipped }
            let guardCAS = target?.meta.cas ?? .zero
            do {
                if deleted {
                    // Where the target had nothing, a document written since the read is not overwritten unseen:
                    // the node's own conflict resolution judges that race (a tombstone has no ADD).
                    _ = try await handle.deleteWithMeta(
                        key, meta: meta, value: e.value, guardCAS: guardCAS, skipConflictResolution: target != nil)
                } else if target != nil {
                    _ = try await handle.setWithMeta(
                        key, e.value, meta: meta, guardCAS: guardCAS, skipConflictResolution: true)
                } else {
                    _ = try await handle.addWithMeta(key, e.value, meta: meta)
                }
                return deleted ? .deleted : .written
            } catch ClientError.casMismatch {
                continue
            } catch ClientError.keyExists where target == nil {
                continue
            }
        }
        throw BackupError(
            "restore: key \(LogText.quoted(String(decoding: key, as: UTF8.self))) kept changing while its CAS was "
                + "compared \(Limits.restoreConflictRereads + 1) times")
    }

    enum Outcome: Sendable {
        case written, deleted, skipped, expired
    }

    static func apply(_ e: ChangeEvent, handle: CollectionHandle, policy: ConflictPolicy) async throws
        -> Outcome
    {
        let key = e.key
        let deleted = e.kind != .mutation
        if !deleted && e.expiry != 0 && UInt64(e.expiry) <= UInt64(Date().timeIntervalSince1970) { return .expired }
        // The backed-up version's own CAS and revSeqno go with it (SET/ADD/DEL_WITH_META, ADR 0147).
        let meta = DocumentMeta(
            cas: e.cas, revSeqno: e.revSeqno, flags: e.flags, expiry: deleted ? 0 : e.expiry,
            datatype: deleted ? (e.value.isEmpty ? 0 : Datatype.xattr.rawValue) : e.datatype)
        do {
            switch policy {
            case .overwrite where deleted:
                _ = try await handle.deleteWithMeta(key, meta: meta, value: e.value, skipConflictResolution: true)
            case .overwrite:
                _ = try await handle.setWithMeta(key, e.value, meta: meta, skipConflictResolution: true)
            case .newer:
                return try await newerWins(e, key: key, meta: meta, deleted: deleted, handle: handle)
            case .skip where deleted:
                // Add semantics: a live document stays; where there is none the tombstone is written.
                do {
                    _ = try await handle.get(key)
                    return .skipped
                } catch ClientError.keyNotFound {}
                _ = try await handle.deleteWithMeta(key, meta: meta, value: e.value, skipConflictResolution: true)
            case .skip:
                _ = try await handle.addWithMeta(key, e.value, meta: meta)
            }
        } catch ClientError.keyExists {
            return .skipped  // the target's version won conflict resolution, or (skip) a live document is there
        }
        return deleted ? .deleted : .written
    }
}

extension RestoreSummary {
    mutating func add(_ o: RestoreRunner.Outcome) {
        switch o {
        case .written: written += 1
        case .deleted: deleted += 1
        case .skipped: skipped += 1
        case .expired: expired += 1
        }
    }
}
