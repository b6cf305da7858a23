import Foundation
import Logging
import NIOCore
import SetteeClient
import SetteeCore

/// Counters of a running backup or restore, for the terminal's progress line and the summary.
public struct TransferProgress: Sendable, Equatable {
    public var items: UInt64 = 0
    /// Key and value bytes read or written.
    public var bytes: UInt64 = 0
    public var vbucketsDone = 0
    public var vbucketsTotal = 0
    public var collection = ""
    public init() {}
}

/// The segment files of one collection being written: a `SegmentWriter` and an open `.partial` file per vBucket.
/// Touched only inside `blocking` calls the runner awaits one at a time.
final class OpenSegments: @unchecked Sendable {
    var writers: [UInt16: SegmentWriter] = [:]
    var files: [UInt16: FileHandle] = [:]
    var finished: [SegmentEntry] = []

    func open(_ h: SegmentHeader, at url: URL) throws {
        let partial = url.appendingPathExtension("partial")
        try? files[h.vbucket.rawValue]?.close()
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        guard FileManager.default.createFile(atPath: partial.path, contents: nil),
            let f = FileHandle(forWritingAtPath: partial.path)
        else { throw BackupError("\(partial.path): cannot create") }
        var w = SegmentWriter(header: h)
        try f.write(contentsOf: w.start())
        writers[h.vbucket.rawValue] = w
        files[h.vbucket.rawValue] = f
    }

    func append(_ vb: VBucketID, _ events: [ChangeEvent]) throws {
        guard var w = writers[vb.rawValue], let f = files[vb.rawValue] else { return }
        var out: [UInt8] = []
        for e in events { out += w.append(e) }
        writers[vb.rawValue] = w
        if !out.isEmpty { try f.write(contentsOf: out) }
    }

    func finish(_ vb: VBucketID, end: ChangeStreamPosition, at url: URL) throws {
        guard var w = writers[vb.rawValue], let f = files[vb.rawValue] else { return }
        try f.write(contentsOf: w.finish(end: end))
        try f.synchronize()
        try f.close()
        files[vb.rawValue] = nil
        writers[vb.rawValue] = nil
        let partial = url.appendingPathExtension("partial")
        if FileManager.default.fileExists(atPath: url.path) { try FileManager.default.removeItem(at: url) }
        try FileManager.default.moveItem(at: partial, to: url)
        finished.append(
            SegmentEntry(
                vbucket: vb, start: w.header.start, end: end, restarted: w.header.restarted, records: w.records,
                bytes: UInt64(w.bytesOut)))
    }

    func closeAll() {
        for f in files.values { try? f.close() }
        files = [:]
    }
}

/// Takes backups into a `BackupRepository` over change streams (the shell of `BackupPlan`, ADR 0147).
public struct BackupRunner: Sendable {
    public let repository: BackupRepository
    public let options: ClientOptions
    public let logger: Logger

    public init(repository: BackupRepository, options: ClientOptions, logger: Logger) {
        self.repository = repository
        self.options = options
        self.logger = logger
    }

    /// A new backup name: the UTC time, sortable (`2026-11-30T03_40_00.123Z`).
    public static func newName(now: Date = Date()) -> String {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "UTC")
        f.dateFormat = "yyyy-MM-dd'T'HH_mm_ss.SSS'Z'"
        return f.string(from: now)
    }

    /// Takes a backup of `options.bucket`'s `collections`: resumes the bucket's newest backup if it was interrupted,
    /// else starts a new one, incremental from the newest complete backup (full when there is none, or `full`).
    /// Returns the complete manifest. `progress` is called after every batch.
    public func run(
        collections: [BackupCollection], full: Bool = false, name: String? = nil,
        progress: @escaping @Sendable (TransferProgress) -> Void = { _ in }
    ) async throws -> BackupManifest {
        let repo = repository
        let bucket = options.bucket
        let started = Date()
        let existing = try await blocking { try repo.backups(bucket) }
        var plan: BackupManifest
        if let last = existing.last, last.manifest == nil,
            let p = try await blocking({ try repo.plan(bucket, last.name) })
        {
            plan = p
            logger.notice("resuming interrupted backup \(bucket)/\(p.name)")
        } else {
            let parent = full ? nil : existing.last(where: { $0.manifest != nil })?.manifest
            let client = try await BucketClient.connect(options, logger: logger)
            let vbuckets = client.currentConfig?.numVBuckets ?? 0
            await client.close()
            guard vbuckets > 0 else { throw BackupError("bucket \(bucket): no vBucket map") }
            if let parent, parent.vbuckets != vbuckets {
                throw BackupError("bucket \(bucket) has \(vbuckets) vBuckets, its last backup \(parent.vbuckets)")
            }
            plan = BackupManifest(
                bucket: bucket, name: name ?? Self.newName(), parent: parent?.name, vbuckets: vbuckets,
                collections: collections)
            let p = plan
            try await blocking { try repo.write(p, complete: false) }
        }
        let parent = try await plan.parent.asyncMap { n in try await blocking { try repo.manifest(bucket, n) } } ?? nil
        var done = plan
        var total = TransferProgress()
        for c in plan.collections {
            let starts = parent?.ends(collection: c.id) ?? [:]
            let segs = try await backupCollection(
                c, name: plan.name, vbuckets: plan.vbuckets, starts: starts, progress: progress, total: &total)
            done.segments[c.id] = segs
        }
        done.items = done.segments.values.flatMap { $0 }.reduce(0) { $0 + $1.records }
        done.bytes = done.segments.values.flatMap { $0 }.reduce(0) { $0 + $1.bytes }
        done.seconds = Date().timeIntervalSince(started)
        let final = done
        try await blocking { try repo.write(final, complete: true) }
        return final
    }

    /// One collection's segments: those an interrupted run finished (read back and checked) plus the ones this run
    /// streams.
    func backupCollection(
        _ c: BackupCollection, name: String, vbuckets: Int, starts: [VBucketID: ChangeStreamPosition],
        progress: @escaping @Sendable (TransferProgress) -> Void, total: inout TransferProgress
    ) async throws -> [SegmentEntry] {
        let repo = repository
        let bucket = options.bucket
        // Segments a previous run of this backup finished (renamed from .partial only once whole).
        let kept: [SegmentEntry] = try await blocking {
            var out: [SegmentEntry] = []
            for i in 0..<vbuckets {
                let vb = VBucketID(UInt16(i))
                let url = repo.segmentURL(bucket, name, c, vb)
                guard FileManager.default.fileExists(atPath: url.path) else { continue }
                let (h, t) = try repo.readSegment(url)
                let size = (try? FileManager.default.attributesOfItem(atPath: url.path)[.size] as? Int) ?? 0
                out.append(
                    SegmentEntry(
                        vbucket: vb, start: h.start, end: t.end, restarted: h.restarted, records: t.records,
                        bytes: UInt64(size)))
            }
            return out
        }
        var machine = BackupPlan(
            collection: c.id, vbuckets: vbuckets, starts: starts, alreadyDone: Set(kept.map(\.vbucket)))
        total.collection = c.path
        total.vbucketsTotal = vbuckets
        total.vbucketsDone = kept.count
        if machine.remaining == 0 { return kept }

        // Every collection, the default one too, through a filtered stream of its id: the node then says with
        // SEQNO_ADVANCED where records of other collections (and their creation events) end a snapshot, so a
        // vBucket whose last seqnos are not this collection's still reaches its end (`changeStreamReportsProgress`
        // hands out that position without events). A default-only stream never learnt of them and waited out the
        // deadline once a bucket had a named collection.
        var streamOptions = options
        streamOptions.changeStreamIncludesXattrs = true
        streamOptions.changeStreamCollection = c.id
        streamOptions.changeStreamReportsProgress = true
        var clientOptions = options
        clientOptions.collections = c.id != 0
        let client = try await BucketClient.connect(clientOptions, logger: logger)
        let stream: ChangeStream
        do {
            stream = try await ChangeStream.open(
                streamOptions, from: machine.streamPositions, name: "settee-backup:\(name)", logger: logger)
        } catch {
            await client.close()
            throw error
        }
        let files = OpenSegments()
        let deadline = Task {
            try? await Task.sleep(for: .seconds(Limits.backupStreamDeadlineSeconds))
            await stream.close()
        }
        defer { deadline.cancel() }
        do {
            var pending = machine.start()
            while !pending.isEmpty {
                let d = pending.removeFirst()
                pending += try await perform(d, &machine, files: files, c, name: name, client: client, events: [])
            }
            if machine.remaining > 0 {
                for await batch in stream.batches {
                    let directives = machine.batch(batch.vbucket, position: batch.position, restarted: batch.restarted)
                    var queue = directives
                    while !queue.isEmpty {
                        let d = queue.removeFirst()
                        if case .append = d {
                            total.items += UInt64(batch.events.count)
                            total.bytes += UInt64(batch.events.reduce(0) { $0 + $1.key.count + $1.value.count })
                        }
                        if case .finishSegment = d { total.vbucketsDone += 1 }
                        queue += try await perform(
                            d, &machine, files: files, c, name: name, client: client, events: batch.events)
                    }
                    progress(total)
                    if machine.remaining == 0 { break }
                }
            }
        } catch {
            files.closeAll()
            await stream.close()
            await client.close()
            throw error
        }
        files.closeAll()
        await stream.close()
        await client.close()
        if machine.remaining > 0 {
            let behind = machine.behind.prefix(20).map { String($0.rawValue) }.joined(separator: ",")
            throw BackupError(
                "collection \(c.path): \(machine.remaining) vBuckets did not reach their end within "
                    + "\(Limits.backupStreamDeadlineSeconds) s (\(behind)); run the backup again to resume")
        }
        return kept + files.finished
    }

    /// Performs one directive; returns the directives it led to (a target observed).
    func perform(
        _ d: BackupPlan.Directive, _ machine: inout BackupPlan, files: OpenSegments, _ c: BackupCollection,
        name: String, client: BucketClient, events: [ChangeEvent]
    ) async throws -> [BackupPlan.Directive] {
        let repo = repository
        let bucket = options.bucket
        switch d {
        case .openSegment(let h):
            let url = repo.segmentURL(bucket, name, c, h.vbucket)
            try await blocking { try files.open(h, at: url) }
        case .append(let vb):
            if !events.isEmpty { try await blocking { try files.append(vb, events) } }
        case .finishSegment(let vb, let end):
            let url = repo.segmentURL(bucket, name, c, vb)
            try await blocking { try files.finish(vb, end: end, at: url) }
        case .observeTarget(let vb):
            let high = try await highSeqno(vb, client: client)
            return machine.targetObserved(vb, highSeqno: high)
        case .complete:
            break
        }
        return []
    }

    /// The vBucket's high seqno on its active copy (OBSERVE_SEQNO), retried while the map moves it.
    func highSeqno(_ vb: VBucketID, client: BucketClient) async throws -> SeqNo {
        var lastError: (any Error)? = nil
        for attempt in 0..<50 {
            if attempt > 0 { try await Task.sleep(for: .milliseconds(200)) }
            guard let active = client.chainAddresses(of: vb)?.first, let node = active else { continue }
            do {
                return try await client.observeSeqno(
                    vb, uuid: VBucketUUID(0), on: node, timeoutMs: options.operationTimeoutMs
                ).currentSeqno
            } catch {
                lastError = error
            }
        }
        throw BackupError(
            "vBucket \(vb.rawValue): no high seqno from its active copy: \(String(describing: lastError))")
    }
}

extension Optional {
    func asyncMap<U>(_ f: (Wrapped) async throws -> U) async rethrows -> U? {
        switch self {
        case .some(let w): return try await f(w)
        case .none: return nil
        }
    }
}
