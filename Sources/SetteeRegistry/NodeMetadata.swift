import Foundation
import SetteeClusterMap
import SetteeCore
import SetteeDiagnostics
import SetteeStorage
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Everything a node must remember across restarts besides bucket data: `<dataDir>/node-metadata.json`.
///
/// File format (see docs/adr/0003-node-metadata.md): a JSON envelope
/// `{"format":1,"crc32":N,"metadata":"<JSON text>"}` where `crc32` is CRC-32 of the UTF-8 bytes of the
/// inner text. The inner text is a `NodeMetadata` encoded with sorted keys.
struct NodeMetadata: Codable, Sendable, Equatable {
    static let fileName = "node-metadata.json"
    static let currentFormat = 1

    struct Bucket: Codable, Sendable, Equatable {
        var settings: BucketSettings
        /// `rev` of the bucket's config at its last change.
        var rev: Int64
        /// Which node holds which vBucket. nil in files written before clustering: the initial layout over the
        /// active members (a single node then).
        var placement: BucketPlacement?
    }

    var nodeUUID: String
    var cluster: ClusterIdentity
    /// Node-wide RAM quota for the data service (MiB), as `POST /pools/default memoryQuota` sets it.
    var memoryQuotaMB: Int
    var services: [String]
    var admin: StoredAdminCredential?
    var buckets: [Bucket]
    /// `revEpoch` of every config this node serves.
    var revEpoch: Int64
    /// The last `rev` handed out; every config change takes the next one, so revisions never repeat,
    /// also when a bucket is deleted and re-created under the same name.
    var lastRev: Int64
    /// The shared secret nodes use to authenticate to each other (user `NodeRegistry.internalUsername`):
    /// random at first start, replaced by the cluster's when the node joins one. nil in older files.
    var internalSecret: String?
    /// The secret `internalSecret` replaced at its last rotation, still accepted (and still sent) until
    /// `previousInternalSecretUntil` (Unix seconds) so nodes that have not adopted the rotation keep talking.
    /// nil in older files and when no rotation happened.
    var previousInternalSecret: String?
    var previousInternalSecretUntil: UInt64?
    /// The cluster's nodes, this one included. nil or empty in files written before clustering: this node alone.
    var members: [ClusterMember]?
    /// Auto-failover settings (`/settings/autoFailover`); nil = Couchbase's defaults, disabled.
    var autoFailover: AutoFailoverSettings?
    /// The member that made the last topology change: it stays orchestrator while it is a healthy active
    /// member, so a rebalance that changes memberships does not hand the role over half-way.
    var orchestrator: NodeID?
    /// The highest cluster epoch this node promised, and to whom (`EpochRules`): local to the node, never taken
    /// from a peer's document. nil in older files and until the first promise.
    var promise: EpochPromise?
    /// Local RBAC users (`/settings/rbac/users/local/NAME`), salted SCRAM keys only; nil in older files.
    var users: [StoredLocalUser]?
    /// Trusted CA certificates for node-to-node TLS (PEM, one certificate each; `loadTrustedCAs`, ADR 0047);
    /// nil in older files and until one is loaded.
    var trustedCAs: [TrustedCAEntry]?
    /// The audit configuration (`/settings/audit`, ADR 0148); nil in older files and until set: Couchbase's
    /// defaults, disabled.
    var audit: AuditSettings?
    /// The auto-compaction settings (`/settings/autoCompaction`, ADR 0159); nil in older files and until set:
    /// Couchbase's defaults (30 % for data files and view indexes).
    var autoCompaction: AutoCompaction.Settings?

    private struct Envelope: Codable {
        var format: Int
        var crc32: UInt32
        var metadata: String
    }

    func encodedFile() throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let inner = String(decoding: try encoder.encode(self), as: UTF8.self)
        let envelope = Envelope(format: Self.currentFormat, crc32: CRC32.checksum(Array(inner.utf8)), metadata: inner)
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        return Array(try encoder.encode(envelope))
    }

    static func decode(file bytes: [UInt8]) throws(RegistryError) -> NodeMetadata {
        let envelope: Envelope
        do { envelope = try JSONDecoder().decode(Envelope.self, from: Data(bytes)) } catch {
            throw .corruptMetadata("metadata envelope is not valid JSON: \(error)")
        }
        guard envelope.format == currentFormat else {
            throw .corruptMetadata("unknown metadata format \(envelope.format)")
        }
        let inner = Array(envelope.metadata.utf8)
        let crc = CRC32.checksum(inner)
        guard crc == envelope.crc32 else {
            throw .corruptMetadata("metadata checksum mismatch: stored \(envelope.crc32), computed \(crc)")
        }
        do { return try JSONDecoder().decode(NodeMetadata.self, from: Data(inner)) } catch {
            throw .corruptMetadata("metadata body does not decode: \(error)")
        }
    }
}

/// Small POSIX file helpers for the data directory.
enum DataDirectory {
    /// Writes `bytes` to `path` so that a crash leaves either the old or the new file: write a temp file,
    /// fsync it, rename over `path`, fsync the directory (so the rename itself is durable).
    static func writeAtomically(_ bytes: [UInt8], to path: String) throws(RegistryError) {
        let dir = (path as NSString).deletingLastPathComponent
        let tmp = path + ".tmp"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .io("open \(tmp): \(errnoText())") }
        var written = 0
        var failure: String? = nil
        bytes.withUnsafeBytes { raw in
            while written < raw.count {
                let n = write(fd, raw.baseAddress! + written, raw.count - written)
                if n < 0 {
                    if errno == EINTR { continue }
                    failure = "write \(tmp): \(errnoText())"
                    return
                }
                written += n
            }
        }
        if failure == nil && fsync(fd) != 0 { failure = "fsync \(tmp): \(errnoText())" }
        close(fd)
        if let failure {
            unlink(tmp)
            throw .io(failure)
        }
        guard rename(tmp, path) == 0 else {
            let message = "rename \(tmp) -> \(path): \(errnoText())"
            unlink(tmp)
            throw .io(message)
        }
        try fsyncDirectory(dir)
    }

    static func fsyncDirectory(_ dir: String) throws(RegistryError) {
        let dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard dfd >= 0 else { throw .io("open \(dir): \(errnoText())") }
        defer { close(dfd) }
        guard fsync(dfd) == 0 else { throw .io("fsync \(dir): \(errnoText())") }
    }

    /// Whole file, or nil when it does not exist.
    static func read(_ path: String) throws(RegistryError) -> [UInt8]? {
        guard FileManager.default.fileExists(atPath: path) else { return nil }
        guard let data = FileManager.default.contents(atPath: path) else { throw .io("read \(path) failed") }
        return Array(data)
    }

    /// Creates `path` (and parents) and makes it 0700 whatever the umask: the data directory holds the
    /// metadata (password keys, the internal secret) and every bucket's documents.
    static func makeDirectory(_ path: String) throws(RegistryError) {
        do { try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true) } catch {
            throw .io("mkdir \(path): \(error)")
        }
        guard chmod(path, 0o700) == 0 else { throw .io("chmod \(path): \(errnoText())") }
        // The new directory's entry is durable before anything names it (the metadata committed next names a bucket
        // directory): after a power loss it could be missing, and the bucket with it.
        try fsyncDirectory((path as NSString).deletingLastPathComponent)
    }

    static func remove(_ path: String) throws(RegistryError) {
        guard FileManager.default.fileExists(atPath: path) else { return }
        do { try FileManager.default.removeItem(atPath: path) } catch { throw .io("remove \(path): \(error)") }
    }

    static func listDirectory(_ path: String) -> [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
    }

    static func errnoText() -> String { String(cString: strerror(errno)) }
}

/// An exclusive `flock` on `<dataDir>/.lock`, so two nodes never share a data directory (they would
/// overwrite each other's metadata and engine files). Held until `release()` or deinit.
final class DirectoryLock: Sendable {
    static let fileName = ".lock"
    private let fd: Mutex<Int32>

    init(directory: String) throws(RegistryError) {
        let path = directory + "/" + Self.fileName
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .io("open \(path): \(DataDirectory.errnoText())") }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            close(fd)
            throw .dataDirectoryInUse(directory)
        }
        self.fd = Mutex(fd)
    }

    func release() {
        fd.withLock { fd in
            if fd >= 0 {
                close(fd)  // closing drops the flock
                fd = -1
            }
        }
    }

    deinit { release() }
}
