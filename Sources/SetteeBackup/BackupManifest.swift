import SetteeClient
import SetteeCore
import SetteeJSON

/// One collection a backup covers, by its names and its id in the source bucket's manifest.
public struct BackupCollection: Sendable, Equatable {
    public var id: UInt32
    public var scope: String
    public var name: String
    public init(id: UInt32, scope: String, name: String) {
        self.id = id
        self.scope = scope
        self.name = name
    }
    public static let defaultCollection = BackupCollection(id: 0, scope: "_default", name: "_default")
    /// `scope.name`.
    public var path: String { "\(scope).\(name)" }
    /// The directory of its segments inside a backup (`c<hex id>`).
    public var directory: String { "c" + String(id, radix: 16) }
}

/// A finished segment as the manifest lists it.
public struct SegmentEntry: Sendable, Equatable {
    public var vbucket: VBucketID
    public var start: ChangeStreamPosition
    public var end: ChangeStreamPosition
    public var restarted: Bool
    public var records: UInt64
    public var bytes: UInt64
    public init(
        vbucket: VBucketID, start: ChangeStreamPosition, end: ChangeStreamPosition, restarted: Bool, records: UInt64,
        bytes: UInt64
    ) {
        self.vbucket = vbucket
        self.start = start
        self.end = end
        self.restarted = restarted
        self.records = records
        self.bytes = bytes
    }
}

/// `backup.json` of one backup in a repository (`<repo>/<bucket>/<name>/backup.json`): what it covers, the backup it
/// continues (`parent`, nil for a full one) and every segment with its start and end positions. Written last: a
/// backup directory without it is an interrupted run that `settee backup` resumes (`plan.json` names its parent).
public struct BackupManifest: Sendable, Equatable {
    public var bucket: String
    public var name: String
    public var parent: String?
    public var vbuckets: Int
    public var collections: [BackupCollection]
    /// Segments per collection id.
    public var segments: [UInt32: [SegmentEntry]]
    public var items: UInt64
    public var bytes: UInt64
    public var seconds: Double

    public init(
        bucket: String, name: String, parent: String?, vbuckets: Int, collections: [BackupCollection],
        segments: [UInt32: [SegmentEntry]] = [:], items: UInt64 = 0, bytes: UInt64 = 0, seconds: Double = 0
    ) {
        self.bucket = bucket
        self.name = name
        self.parent = parent
        self.vbuckets = vbuckets
        self.collections = collections
        self.segments = segments
        self.items = items
        self.bytes = bytes
        self.seconds = seconds
    }

    public var isFull: Bool { parent == nil }

    static func position(_ p: ChangeStreamPosition) -> JSON {
        .array([.string(String(p.vbucketUUID.rawValue)), .string(String(p.seqno.rawValue))])
    }

    static func position(_ j: JSON?) throws(BackupFormatError) -> ChangeStreamPosition {
        guard let a = j?.arrayValue, a.count == 2, let u = a[0].stringValue.flatMap({ UInt64($0) }),
            let s = a[1].stringValue.flatMap({ UInt64($0) })
        else { throw BackupFormatError("bad position") }
        return ChangeStreamPosition(seqno: SeqNo(s), vbucketUUID: VBucketUUID(u))
    }

    /// The manifest as JSON (uuids and seqnos as decimal strings: they exceed 2^53).
    public func json() -> JSON {
        var cols: [JSON] = []
        for c in collections {
            let segs: [JSON] = (segments[c.id] ?? []).map { s in
                .object([
                    ("vb", .integer(Int128(s.vbucket.rawValue))), ("start", Self.position(s.start)),
                    ("end", Self.position(s.end)), ("restarted", .bool(s.restarted)),
                    ("records", .string(String(s.records))), ("bytes", .string(String(s.bytes))),
                ])
            }
            cols.append(
                .object([
                    ("id", .integer(Int128(c.id))), ("scope", .string(c.scope)), ("name", .string(c.name)),
                    ("segments", .array(segs)),
                ]))
        }
        return .object([
            ("version", 1), ("bucket", .string(bucket)), ("name", .string(name)),
            ("parent", parent.map { .string($0) } ?? .null), ("vbuckets", .integer(Int128(vbuckets))),
            ("collections", .array(cols)), ("items", .string(String(items))), ("bytes", .string(String(bytes))),
            ("seconds", .number(seconds)),
        ])
    }

    /// Parses `backup.json` or `plan.json` bytes, at most `Limits.backupMaxManifestBytes`, with every field checked.
    public static func parse(_ bytes: [UInt8]) throws(BackupFormatError) -> BackupManifest {
        let j: JSON
        do {
            j = try JSON.parse(
                bytes, maxBytes: Limits.backupMaxManifestBytes, maxValues: Limits.backupMaxManifestBytes / 4)
        } catch { throw BackupFormatError("manifest: \(error)") }
        guard j["version"]?.intValue == 1, let bucket = j["bucket"]?.stringValue, let name = j["name"]?.stringValue,
            let vbuckets = j["vbuckets"]?.intValue, vbuckets > 0, vbuckets <= Int(UInt16.max) + 1,
            let cols = j["collections"]?.arrayValue, cols.count <= Limits.backupMaxCollections
        else { throw BackupFormatError("manifest: missing or bad fields") }
        var m = BackupManifest(
            bucket: bucket, name: name, parent: j["parent"]?.stringValue, vbuckets: vbuckets, collections: [])
        for c in cols {
            guard let id = c["id"]?.intValue.flatMap({ UInt32(exactly: $0) }), let scope = c["scope"]?.stringValue,
                let cname = c["name"]?.stringValue
            else { throw BackupFormatError("manifest: bad collection") }
            m.collections.append(BackupCollection(id: id, scope: scope, name: cname))
            var segs: [SegmentEntry] = []
            for s in c["segments"]?.arrayValue ?? [] {
                guard let vb = s["vb"]?.intValue, vb >= 0, vb < vbuckets,
                    let records = s["records"]?.stringValue.flatMap({ UInt64($0) }),
                    let segBytes = s["bytes"]?.stringValue.flatMap({ UInt64($0) })
                else { throw BackupFormatError("manifest: bad segment") }
                segs.append(
                    SegmentEntry(
                        vbucket: VBucketID(UInt16(vb)), start: try position(s["start"]), end: try position(s["end"]),
                        restarted: s["restarted"]?.boolValue ?? false, records: records, bytes: segBytes))
            }
            m.segments[id] = segs
        }
        m.items = j["items"]?.stringValue.flatMap { UInt64($0) } ?? 0
        m.bytes = j["bytes"]?.stringValue.flatMap { UInt64($0) } ?? 0
        m.seconds = j["seconds"]?.numberValue ?? 0
        return m
    }

    /// Where each (collection, vBucket) of this backup ended: the next incremental backup's starts.
    public func ends(collection: UInt32) -> [VBucketID: ChangeStreamPosition] {
        var out: [VBucketID: ChangeStreamPosition] = [:]
        for s in segments[collection] ?? [] { out[s.vbucket] = s.end }
        return out
    }
}
