import Foundation
import NIOPosix
import SetteeClient
import SetteeCore
import SetteeJSON

/// A backup file could not be read, written or verified: the file and why.
public struct BackupError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// A backup repository directory, as `cbbackupmgr`'s (ADR 0147):
///
/// ```
/// <repo>/settee-backup-repo            marks the directory as a repository
/// <repo>/<bucket>/<name>/plan.json     written first: bucket, parent, collections (an interrupted run resumes it)
/// <repo>/<bucket>/<name>/backup.json   written last (`BackupManifest`): the backup is complete
/// <repo>/<bucket>/<name>/c<id>/vb-NNNN.seg   one segment per collection and vBucket (`SegmentWriter`)
/// ```
///
/// Backup names are UTC timestamps (`2026-11-30T03_40_00.123Z`), so they sort in the order they were taken. File I/O
/// is blocking: callers run it on NIO's blocking pool (`blocking`).
public struct BackupRepository: Sendable {
    public let root: URL
    static let marker = "settee-backup-repo"

    public init(_ path: String) {
        root = URL(fileURLWithPath: path, isDirectory: true)
    }

    /// Creates the repository directory (and marker) when missing; fails if `root` exists and is not one.
    public func create() throws {
        let fm = FileManager.default
        let m = root.appendingPathComponent(Self.marker)
        if fm.fileExists(atPath: m.path) { return }
        if fm.fileExists(atPath: root.path), let items = try? fm.contentsOfDirectory(atPath: root.path), !items.isEmpty
        {
            throw BackupError("\(root.path) exists and is not an empty directory or a backup repository")
        }
        try fm.createDirectory(at: root, withIntermediateDirectories: true)
        try Data("settee backup repository, version 1\n".utf8).write(to: m)
    }

    /// Fails unless `root` is a repository.
    public func check() throws {
        guard FileManager.default.fileExists(atPath: root.appendingPathComponent(Self.marker).path) else {
            throw BackupError("\(root.path) is not a backup repository (no \(Self.marker))")
        }
    }

    public func bucketDirectory(_ bucket: String) -> URL { root.appendingPathComponent(bucket, isDirectory: true) }
    public func backupDirectory(_ bucket: String, _ name: String) -> URL {
        bucketDirectory(bucket).appendingPathComponent(name, isDirectory: true)
    }
    public func segmentURL(_ bucket: String, _ name: String, _ c: BackupCollection, _ vb: VBucketID) -> URL {
        let n = String(vb.rawValue)
        return backupDirectory(bucket, name).appendingPathComponent(c.directory, isDirectory: true)
            .appendingPathComponent("vb-" + String(repeating: "0", count: max(0, 4 - n.count)) + n + ".seg")
    }

    /// The buckets with backups.
    public func buckets() throws -> [String] {
        try check()
        return try FileManager.default.contentsOfDirectory(atPath: root.path).filter { $0 != Self.marker }.sorted()
    }

    /// The backups of `bucket`, oldest first: (name, complete manifest or nil for an interrupted one).
    public func backups(_ bucket: String) throws -> [(name: String, manifest: BackupManifest?)] {
        let dir = bucketDirectory(bucket)
        guard FileManager.default.fileExists(atPath: dir.path) else { return [] }
        return try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted().map { name in
            (name, try manifest(bucket, name))
        }
    }

    /// The complete manifest of one backup, nil when it has none (interrupted).
    public func manifest(_ bucket: String, _ name: String) throws -> BackupManifest? {
        let url = backupDirectory(bucket, name).appendingPathComponent("backup.json")
        guard FileManager.default.fileExists(atPath: url.path) else { return nil }
        return try readManifest(url)
    }

    public func plan(_ bucket: String, _ name: String) throws -> BackupManifest? {
        let url = backupDirectory(bucket, name).appendingPathComponent("plan.json")
        guard FileManager.default.fileExists(atPath: url.path) else { return nil }
        return try readManifest(url)
    }

    func readManifest(_ url: URL) throws -> BackupManifest {
        let h = try FileHandle(forReadingFrom: url)
        defer { try? h.close() }
        let data = try h.read(upToCount: Limits.backupMaxManifestBytes + 1) ?? Data()
        guard data.count <= Limits.backupMaxManifestBytes else {
            throw BackupError("\(url.path): larger than \(Limits.backupMaxManifestBytes) bytes")
        }
        do { return try BackupManifest.parse(Array(data)) } catch { throw BackupError("\(url.path): \(error)") }
    }

    /// Writes `plan.json` (`complete == false`) or `backup.json` atomically (a temporary file renamed).
    public func write(_ m: BackupManifest, complete: Bool) throws {
        let dir = backupDirectory(m.bucket, m.name)
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        try Data(m.json().serialized()).write(
            to: dir.appendingPathComponent(complete ? "backup.json" : "plan.json"), options: .atomic)
    }

    /// The chain a restore of backup `name` applies, oldest (the full backup) first, following `parent` links.
    public func chain(_ bucket: String, to name: String) throws -> [BackupManifest] {
        var out: [BackupManifest] = []
        var next: String? = name
        while let n = next {
            guard let m = try manifest(bucket, n) else {
                throw BackupError("backup \(bucket)/\(n) is missing or incomplete (no backup.json)")
            }
            guard out.count < 100_000, !out.contains(where: { $0.name == n }) else {
                throw BackupError("backup \(bucket)/\(name): its parent links loop")
            }
            out.append(m)
            next = m.parent
        }
        return out.reversed()
    }

    /// Reads and verifies one segment file whole, calling `body` with each block's records.
    public func readSegment(
        _ url: URL, _ body: ([ChangeEvent]) throws -> Void = { _ in }
    ) throws -> (SegmentHeader, SegmentTrailer) {
        guard let h = FileHandle(forReadingAtPath: url.path) else { throw BackupError("\(url.path): cannot open") }
        defer { try? h.close() }
        do {
            var r = try SegmentReader(FileByteSource(handle: h))
            while let events = try r.nextBlock() { try body(events) }
            guard let t = r.trailer else { throw BackupFormatError("no trailer") }
            return (r.header, t)
        } catch let e as BackupFormatError {
            throw BackupError("\(url.path): \(e)")
        }
    }

    /// Verifies every segment a backup's manifest lists: each file reads whole (checksums, lengths, trailer) and its
    /// header and trailer agree with the manifest. Returns the segments checked; throws at the first bad one.
    public func verify(_ m: BackupManifest) throws -> Int {
        var n = 0
        for c in m.collections {
            for s in m.segments[c.id] ?? [] {
                let url = segmentURL(m.bucket, m.name, c, s.vbucket)
                let (h, t) = try readSegment(url)
                guard h.vbucket == s.vbucket, h.collection == c.id, h.start == s.start, h.restarted == s.restarted,
                    t.end == s.end, t.records == s.records
                else { throw BackupError("\(url.path): does not match backup.json") }
                n += 1
            }
        }
        return n
    }

    /// Removes backup `name` of `bucket` and every backup that builds on it (an incremental whose parent chain
    /// reaches it), as `cbbackupmgr remove` keeps no chain without its base. Returns the names removed, oldest first.
    @discardableResult
    public func remove(_ bucket: String, _ name: String) throws -> [String] {
        try check()
        let all = try backups(bucket)
        guard all.contains(where: { $0.name == name }) else { throw BackupError("no backup \(bucket)/\(name)") }
        var doomed: Set<String> = [name]
        // Oldest first, so a child's parent is decided before the child.
        for b in all {
            if let p = b.manifest?.parent, doomed.contains(p) { doomed.insert(b.name) }
        }
        let names = doomed.sorted()
        for n in names { try FileManager.default.removeItem(at: backupDirectory(bucket, n)) }
        return names
    }
}

/// A file read through `FileHandle`.
struct FileByteSource: BackupByteSource {
    let handle: FileHandle
    mutating func read(_ count: Int) throws -> [UInt8] {
        var out: [UInt8] = []
        while out.count < count {
            guard let d = try handle.read(upToCount: count - out.count), !d.isEmpty else { break }
            out += d
        }
        return out
    }
}

/// Runs blocking file work on NIO's blocking pool, off the cooperative pool.
func blocking<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await NIOThreadPool.singleton.runIfActive(body)
}
