import ArgumentParser
import Foundation
import Logging
import SetteeBackup
import SetteeClient
import SetteeCore
import SetteeJSON
import SetteeTLS
import Synchronization

/// `settee backup`: backups of a bucket into a repository directory, as `cbbackupmgr backup` (ADR 0147).
struct BackupCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backup",
        abstract: "Back a bucket up into a repository directory (full, then incremental), and manage the repository.",
        subcommands: [Take.self, List.self, Info.self, Verify.self, Remove.self], defaultSubcommand: Take.self)

    struct RepoOption: ParsableArguments {
        @Option(help: "Backup repository directory (created by the first backup).") var repo: String
    }

    struct Take: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "take",
            abstract:
                "Take a backup: resumes an interrupted one, else incremental from the last complete backup (full with --full)."
        )
        @OptionGroup var global: GlobalOptions
        @OptionGroup var repo: RepoOption
        @Option(help: "Bucket.") var bucket = "demo"
        @Flag(help: "A full backup even when an earlier one exists.") var full = false
        @Option(help: "Operation deadline in milliseconds.") var timeoutMs = ClientLimits.defaultOperationTimeoutMs

        func run() async throws {
            let repository = BackupRepository(repo.repo)
            try repository.create()
            let collections = try await backupCollections()
            var logger = Logger(label: "settee.backup")
            logger.logLevel = .warning
            var options = ClientOptions(
                seeds: global.clusterSeeds.compactMap { Seed($0) }, bucket: bucket, username: global.user,
                password: global.pass, operationTimeoutMs: timeoutMs)
            options.tls = try global.tlsTrust()
            let runner = BackupRunner(repository: repository, options: options, logger: logger)
            let reporter = try TaskReporter(global, kind: "backup", bucket: bucket)
            let last = Mutex(TransferProgress())
            let m: BackupManifest
            do {
                m = try await runner.run(collections: collections, full: full) { p in
                    Terminal.progress(
                        "\(p.collection): vBuckets \(p.vbucketsDone)/\(p.vbucketsTotal), \(p.items) items, \(p.bytes) bytes"
                    )
                    last.withLock { $0 = p }
                    reporter.running(name: "", p)
                }
            } catch {
                Terminal.endProgress()
                let p = last.withLock { $0 }
                await reporter.finished(name: "", items: p.items, bytes: p.bytes, error: error)
                throw error
            }
            Terminal.endProgress()
            await reporter.finished(name: m.name, items: m.items, bytes: m.bytes)
            let kind = m.isFull ? "full" : "incremental from \(m.parent ?? "?")"
            print(
                "backup \(m.bucket)/\(m.name) (\(kind)): \(m.items) items, \(m.bytes) bytes, "
                    + String(format: "%.1f s", m.seconds))
        }

        /// The bucket's collections from its manifest (only `_default._default` when it has no scopes API).
        func backupCollections() async throws -> [BackupCollection] {
            guard let manifest = try? await global.json(CollectionPath.adminPath(bucket: bucket)) else {
                return [.defaultCollection]
            }
            var out: [BackupCollection] = []
            for s in manifest["scopes"]?.arrayValue ?? [] {
                guard let scope = s["name"]?.stringValue else { continue }
                for c in s["collections"]?.arrayValue ?? [] {
                    guard let name = c["name"]?.stringValue, let uid = c["uid"]?.stringValue,
                        let id = UInt32(uid, radix: 16)
                    else { continue }
                    out.append(BackupCollection(id: id, scope: scope, name: name))
                }
            }
            guard out.count <= Limits.backupMaxCollections else {
                throw CLIError("bucket \(bucket) has more than \(Limits.backupMaxCollections) collections")
            }
            return out.isEmpty ? [.defaultCollection] : out
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the repository's backups, oldest first.")
        @OptionGroup var repo: RepoOption
        func run() async throws {
            let r = BackupRepository(repo.repo)
            for bucket in try r.buckets() {
                for b in try r.backups(bucket) {
                    if let m = b.manifest {
                        print(
                            "\(bucket)\t\(b.name)\t\(m.isFull ? "full" : "incremental")\t\(m.items) items\t\(m.bytes) bytes"
                        )
                    } else {
                        print("\(bucket)\t\(b.name)\tinterrupted (the next backup resumes it)")
                    }
                }
            }
        }
    }

    struct Info: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show one backup: parent, collections, counts.")
        @OptionGroup var repo: RepoOption
        @Option(help: "Bucket.") var bucket = "demo"
        @Option(help: "Backup name (default: the newest).") var backup: String?
        func run() async throws {
            let r = BackupRepository(repo.repo)
            let m = try newestOrNamed(r, bucket: bucket, backup)
            print("backup \(m.bucket)/\(m.name)")
            print("type: \(m.isFull ? "full" : "incremental from \(m.parent ?? "?")")")
            print("vbuckets: \(m.vbuckets)")
            for c in m.collections {
                let segs = m.segments[c.id] ?? []
                let restarted = segs.filter(\.restarted).count
                print(
                    "collection \(c.path) (id 0x\(String(c.id, radix: 16))): \(segs.count) segments, "
                        + "\(segs.reduce(0) { $0 + $1.records }) records, \(restarted) restarted from 0")
            }
            print("items: \(m.items), bytes: \(m.bytes), seconds: \(String(format: "%.1f", m.seconds))")
        }
    }

    struct Verify: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Read every segment of a backup (or of all) and check checksums, lengths and the manifest.")
        @OptionGroup var repo: RepoOption
        @Option(help: "Bucket.") var bucket = "demo"
        @Option(help: "Backup name (default: every backup of the bucket).") var backup: String?
        func run() async throws {
            let r = BackupRepository(repo.repo)
            try r.check()
            let names = try backup.map { [$0] } ?? r.backups(bucket).map(\.name)
            for name in names {
                guard let m = try r.manifest(bucket, name) else {
                    throw CLIError("backup \(bucket)/\(name) is incomplete (no backup.json)")
                }
                let n = try r.verify(m)
                print("backup \(bucket)/\(name): \(n) segments OK")
            }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove a backup and every incremental backup that builds on it.")
        @OptionGroup var repo: RepoOption
        @Option(help: "Bucket.") var bucket = "demo"
        @Option(help: "Backup name.") var backup: String
        func run() async throws {
            for name in try BackupRepository(repo.repo).remove(bucket, backup) {
                print("removed \(bucket)/\(name)")
            }
        }
    }
}

func newestOrNamed(_ r: BackupRepository, bucket: String, _ name: String?) throws -> BackupManifest {
    try r.check()
    if let name {
        guard let m = try r.manifest(bucket, name) else { throw CLIError("no complete backup \(bucket)/\(name)") }
        return m
    }
    guard let m = try r.backups(bucket).last(where: { $0.manifest != nil })?.manifest else {
        throw CLIError("no complete backup of bucket \(bucket) in \(r.root.path)")
    }
    return m
}

/// `settee restore`: a backup (with the chain it builds on) into a bucket, as `cbbackupmgr restore`.
struct RestoreCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "restore",
        abstract: "Restore a backup (and the backups it builds on) into a bucket of this or another cluster.")
    @OptionGroup var global: GlobalOptions
    @Option(help: "Backup repository directory.") var repo: String
    @Option(help: "Bucket the backup was taken of.") var bucket = "demo"
    @Option(help: "Backup name (default: the newest complete one).") var backup: String?
    @Option(help: "Name mapping: old=new for the bucket, bucket.scope.collection=bucket.scope.collection.")
    var mapData: String?
    @Option(help: "Restore only keys that match this regular expression whole.") var filterKeys: String?
    @Option(
        help:
            "When the target holds a key: skip (keep the target's), overwrite (the backup's), or newer (the higher CAS wins, tombstones included)."
    )
    var conflict: String = "overwrite"
    @Option(help: "Operation deadline in milliseconds.") var timeoutMs = ClientLimits.defaultOperationTimeoutMs

    func run() async throws {
        let r = BackupRepository(repo)
        let last = try newestOrNamed(r, bucket: bucket, backup)
        let chain = try r.chain(bucket, to: last.name)
        guard let policy = ConflictPolicy(rawValue: conflict) else {
            throw ValidationError("--conflict must be skip, overwrite or newer")
        }
        let mapping = try mapData.map { try DataMapping.parse($0) } ?? DataMapping()
        let filter: Regex<AnyRegexOutput>?
        do { filter = try filterKeys.map { try Regex($0) } } catch {
            throw ValidationError("--filter-keys: \(error)")
        }
        var logger = Logger(label: "settee.restore")
        logger.logLevel = .warning
        var options = ClientOptions(
            seeds: global.clusterSeeds.compactMap { Seed($0) }, bucket: mapping.bucket(bucket),
            username: global.user, password: global.pass, operationTimeoutMs: timeoutMs)
        options.tls = try global.tlsTrust()
        let runner = RestoreRunner(repository: r, options: options, logger: logger)
        let reporter = try TaskReporter(global, kind: "restore", bucket: mapping.bucket(bucket))
        let seen = Mutex(TransferProgress())
        let name = last.name
        let s: RestoreSummary
        do {
            s = try await runner.run(chain: chain, mapping: mapping, filter: filter, policy: policy) { p in
                Terminal.progress("\(p.collection): vBuckets \(p.vbucketsDone)/\(p.vbucketsTotal), \(p.items) items")
                seen.withLock { $0 = p }
                reporter.running(name: name, p)
            }
        } catch {
            Terminal.endProgress()
            let p = seen.withLock { $0 }
            await reporter.finished(name: name, items: p.items, bytes: p.bytes, error: error)
            throw error
        }
        Terminal.endProgress()
        await reporter.finished(name: name, items: UInt64(s.written + s.deleted), bytes: s.bytes)
        print(
            "restored \(bucket)/\(last.name) (\(chain.count) backups) into \(mapping.bucket(bucket)): "
                + "\(s.written) written, \(s.deleted) deleted, \(s.skipped) skipped, \(s.filtered) filtered, "
                + "\(s.expired) expired, \(s.bytes) bytes, " + String(format: "%.1f s", s.seconds))
    }
}

/// One progress line on standard error, rewritten in place when it is a terminal.
enum Terminal {
    static let isTTY = isatty(2) != 0
    static func progress(_ line: String) {
        guard isTTY else { return }
        FileHandle.standardError.write(Data(("\r\u{1b}[K" + line).utf8))
    }
    static func endProgress() {
        if isTTY { FileHandle.standardError.write(Data("\n".utf8)) }
    }
}

/// Reports a backup's or restore's progress to the cluster (`POST /controller/reportBackupTask`, shown in
/// `/pools/default/tasks`): while it runs at most every `interval`, then its end. Best effort: a cluster that does
/// not take the report (an older node, a user without cluster manage) is named once on standard error and the work
/// goes on.
final class TaskReporter: Sendable {
    let address: NodeAddress
    let user: String
    let password: String
    let tls: TLSClientContext?
    let id: String
    let kind: String
    let bucket: String
    let interval: Duration = .seconds(2)
    private let state = Mutex<(last: ContinuousClock.Instant?, warned: Bool)>((nil, false))

    init(_ global: GlobalOptions, kind: String, bucket: String) throws {
        address = try global.adminAddress()
        user = global.user
        password = global.pass
        tls = try global.tlsTrust()?.makeClientContext()
        id = "\(kind):\(bucket):\(RandomID.hex128())"
        self.kind = kind
        self.bucket = bucket
    }

    /// A running report, unless one went out less than `interval` ago.
    func running(name: String, _ p: TransferProgress) {
        let now = ContinuousClock.now
        let due = state.withLock { s -> Bool in
            if let last = s.last, now - last < interval { return false }
            s.last = now
            return true
        }
        guard due else { return }
        let progress = p.vbucketsTotal > 0 ? p.vbucketsDone * 100 / p.vbucketsTotal : 0
        Task { await send(name: name, status: "running", progress: progress, items: p.items, bytes: p.bytes) }
    }

    /// The end: `completed`, or `failed` with `error`.
    func finished(name: String, items: UInt64, bytes: UInt64, error: (any Error)? = nil) async {
        await send(
            name: name, status: error == nil ? "completed" : "failed", progress: error == nil ? 100 : 0, items: items,
            bytes: bytes,
            message: error.map { LogText.clipped(String(describing: $0), toUTF8Bytes: Limits.reportedTaskMessageBytes) }
                ?? "")
    }

    private func send(
        name: String, status: String, progress: Int, items: UInt64, bytes: UInt64, message: String = ""
    ) async {
        let form: [(String, String)] = [
            ("id", id), ("kind", kind), ("bucket", bucket), ("name", name), ("status", status),
            ("progress", "\(progress)"), ("items", "\(items)"), ("bytes", "\(bytes)"), ("message", message),
        ]
        let answer = try? await AdminHTTP.request(
            .POST, "/controller/reportBackupTask", at: address, username: user, password: password, form: form, tls: tls
        )
        guard answer?.status != 200 else { return }
        let warn = state.withLock { s in
            defer { s.warned = true }
            return !s.warned
        }
        if warn {
            FileHandle.standardError.write(
                Data(
                    "note: the cluster did not take this \(kind)'s progress for /pools/default/tasks (\(answer.map { "HTTP \($0.status)" } ?? "no answer")); the \(kind) goes on\n"
                        .utf8))
        }
    }
}
