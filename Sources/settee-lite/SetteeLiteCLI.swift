import ArgumentParser
import Foundation
import NIOCore
import SetteeCore
import SetteeDocument
import SetteeJSON
import SetteeLite
import SetteeLiteListener
import SetteeReplication
import SetteeTLS

/// `settee-lite`: the seeds' apps on the command line, over one Lite database directory.
/// Seed 000's console app (`start`, `attach`, `list`) and seed 002's photo drop (`receive`, `send`).
@main
struct SetteeLiteCLI: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "settee-lite",
        abstract: "An embedded Settee Lite database: replicate with a gateway or a peer, attach images, list them.",
        subcommands: [
            Start.self, Attach.self, List.self, Receive.self, Send.self, Get.self, Expire.self, Stats.self,
            Compact.self,
        ])

    /// `settee-lite --db DIR <command>` (as the seeds write it) or `settee-lite <command> --db DIR`.
    @Option(name: .customLong("db"), help: "The database directory (created if absent).")
    var db: String?
}

struct DatabaseOption: ParsableArguments {
    @Option(name: .customLong("db"), help: "The database directory (created if absent; holds one database, named db).")
    var db: String?

    /// The directory given after the command, else before it.
    func path(_ root: SetteeLiteCLI) throws -> String {
        guard let path = db ?? root.db else { throw ValidationError("give the database directory with --db") }
        return path
    }

    func open(_ root: SetteeLiteCLI) throws -> Database {
        let db = try path(root)
        let url = URL(fileURLWithPath: db)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        do {
            return try Database(name: "db", directory: url.path)
        } catch {
            throw ValidationError("cannot open database \(db): \(error)")
        }
    }
}

/// Writes one line to standard output unbuffered (a reader on a pipe sees it at once).
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

/// The images view of seed 000: every `type: "image"` document by `timestamp_added`.
func imagesView(_ database: Database) -> View {
    database.view("images", version: "1") { doc, emit in
        if doc.type == "image", let ts = doc["timestamp_added"] { emit(ts, nil) }
    }
}

/// The endpoint for an `http(s)://` sync URL; `cert=sha256:…` in it pins a listener's self-signed certificate
/// (`RemoteEndpoint` takes the pin out of the URL and checks it, `SyncURLPin`, as the BLIP replicator does for
/// `wss://…?cert=…`).
func remoteEndpoint(_ url: String, user: String?, password: String?) throws -> RemoteEndpoint {
    let auth: ReplicationAuthenticator = user.map { .basic(user: $0, password: password ?? "") } ?? .none
    do { return try RemoteEndpoint(url: url, authenticator: auth) } catch { throw ValidationError("\(error)") }
}

/// One status line, rewritten in place while a replication runs: a progress bar over completed/total.
func statusLine(_ name: String, _ s: ReplicationStatus) -> String {
    let width = 24
    let filled = s.total > 0 ? min(width, s.completed * width / s.total) : 0
    let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
    var line = "\(name) [\(bar)] \(s.completed)/\(s.total) \(s.activity)"
    if let e = s.lastError { line += " — \(e)" }
    return line
}

func readImages(_ paths: [String]) throws -> [(name: String, data: [UInt8], type: String)] {
    try paths.map { path in
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ValidationError("cannot read \(path)")
        }
        let ext = (path as NSString).pathExtension.lowercased()
        let type =
            ["jpg": "image/jpeg", "jpeg": "image/jpeg", "png": "image/png", "gif": "image/gif", "webp": "image/webp"][
                ext] ?? "application/octet-stream"
        return ((path as NSString).lastPathComponent, [UInt8](data), type)
    }
}

/// Saves one document per image: `type: "image"`, `timestamp_added` (ms since 1970, increasing
/// within one call), `name`, and the bytes as attachment `image`. Returns the new ids.
func attachImages(_ database: Database, _ paths: [String]) throws -> [String] {
    let base = Int(Date().timeIntervalSince1970 * 1000)
    var ids: [String] = []
    for (i, image) in try readImages(paths).enumerated() {
        let props: JSON = .object([
            ("type", "image"), ("timestamp_added", .number(Double(base + i))), ("name", .string(image.name)),
        ])
        let id = try database.save(
            Document(properties: props, attachments: ["image": Blob(data: image.data, contentType: image.type)]))
        ids.append(id)
    }
    return ids
}

struct Start: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Push and pull continuously with a gateway database URL (seed 000's `start`).")
    @OptionGroup var database: DatabaseOption
    @ParentCommand var root: SetteeLiteCLI
    @Argument(
        help:
            "The remote database: http://127.0.0.1:4984/demo (CouchDB protocol) or ws://127.0.0.1:4984/demo (BLIP, as Couchbase Lite 2+); https:// or wss:// with ?cert=sha256:HEX pins the peer's certificate"
    ) var url: String
    @Option(help: "User for basic authentication.") var user: String?
    @Option(help: "Password for basic authentication.") var password: String?
    @Option(help: "Pull only these channels (comma-separated).") var channels: String?
    @Option(
        help:
            "Replicate this collection, scope.collection (created if absent), with the gateway keyspace URL.scope.collection (over ws(s), its index on the BLIP connection)"
    ) var collection: String?
    @Flag(help: "Replicate once and exit instead of continuously.") var once = false

    func run() async throws {
        let db = try database.open(root)
        var local = LocalEndpoint(db)
        var url = url
        let blip = url.hasPrefix("ws://") || url.hasPrefix("wss://")
        let auth: ReplicationAuthenticator = user.map { .basic(user: $0, password: password ?? "") } ?? .none
        let pullChannels = channels.map { $0.split(separator: ",").map(String.init) }
        var collectionReplicator: CollectionsReplicator?
        if let collection {
            let parts = collection.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
            guard parts.count == 2 else { throw ValidationError("--collection is scope.collection: \(collection)") }
            let made = try db.createCollection(parts[1], scope: parts[0])
            local = LocalEndpoint(made)
            if blip {
                // One BLIP connection with the collection's index (`getCollections`), as Couchbase Lite 3.1 does.
                var config = ReplicatorConfiguration(target: .url(url))
                config.continuous = !once
                config.authenticator = auth
                config.addCollection(made, configuration: CollectionConfiguration(channels: pullChannels))
                collectionReplicator = try CollectionsReplicator(config)
            } else {
                url = CollectionsReplicator.keyspaceURL(url, scope: parts[0], collection: parts[1])
            }
        }
        let push: Replicator
        let pull: Replicator
        if let made = collectionReplicator?.replicators,
            let p = made.first(where: { $0.type == .push })?.replicator,
            let q = made.first(where: { $0.type == .pull })?.replicator
        {
            (push, pull) = (p, q)
        } else if blip {
            push = try Replicator(db, .push(to: url), continuous: !once, authenticator: auth)
            pull = try Replicator(db, .pull(from: url), continuous: !once, authenticator: auth, channels: pullChannels)
        } else {
            let remote = try remoteEndpoint(url, user: user, password: password)
            let pullFilter = channels.map { ReplicationFilter.channels($0.split(separator: ",").map(String.init)) }
            push = Replicator(source: local, target: remote, options: ReplicatorOptions(continuous: !once))
            var pullOptions = ReplicatorOptions(continuous: !once, filter: pullFilter)
            pullOptions.skipsTombstonesIntoEmptyTarget = true
            pull = Replicator(source: remote, target: local, options: pullOptions)
        }
        push.start()
        pull.start()
        say("replicating \(try database.path(root)) <-> \(ReplicationID.stripCredentials(url))")
        await withTaskGroup(of: Void.self) { group in
            for (name, r) in [("push", push), ("pull", pull)] {
                group.addTask {
                    for await s in r.status {
                        say(statusLine(name, s))
                        if once && s.activity == .stopped { break }
                    }
                }
            }
        }
        if once, let e = push.currentStatus.lastError ?? pull.currentStatus.lastError {
            throw ValidationError("replication failed: \(e)")
        }
    }
}

struct Attach: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Store each image as a document (seed 000's `attach`).")
    @OptionGroup var database: DatabaseOption
    @ParentCommand var root: SetteeLiteCLI
    @Argument(help: "Image files.") var files: [String]

    func run() async throws {
        let db = try database.open(root)
        for (file, id) in zip(files, try attachImages(db, files)) { say("\(id)\t\(file)") }
    }
}

struct List: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List images by timestamp_added, newest first; --live keeps printing as they change.")
    @OptionGroup var database: DatabaseOption
    @ParentCommand var root: SetteeLiteCLI
    @Flag(help: "Print the list again whenever it changes.") var live = false

    func run() async throws {
        let db = try database.open(root)
        let query = imagesView(db).query(descending: true)
        func show(_ rows: [QueryRow]) {
            say("-- \(rows.count) image(s)")
            for row in rows {
                guard let id = row.documentID, let doc = try? db.document(id) else { continue }
                let blob = doc.attachments["image"]
                say(
                    "\(row.key.text)\t\(id)\t\(doc["name"]?.stringValue ?? "")\t\(blob?.length ?? 0)\t\(blob?.digest ?? "")"
                )
            }
        }
        guard live else { return show(try query.run()) }
        for await rows in query.live() { show(rows) }
    }
}

struct Receive: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Listen for a peer (seed 002): prints a one-time sync URL and its QR code, then each arriving document.")
    @OptionGroup var database: DatabaseOption
    @ParentCommand var root: SetteeLiteCLI
    @Flag(help: "Serve HTTPS with a self-signed certificate pinned in the URL.") var tls = false
    @Option(help: "Serve HTTPS with this PEM certificate (chain, leaf first; with --tls-key), reread on SIGHUP.")
    var tlsCert: String?
    @Option(help: "The PEM private key of --tls-cert.") var tlsKey: String?
    @Option(help: "Address to listen on.") var host = "127.0.0.1"

    func validate() throws {
        if (tlsCert == nil) != (tlsKey == nil) { throw ValidationError("--tls-cert and --tls-key go together") }
    }

    func run() async throws {
        let db = try database.open(root)
        let identity = try tlsCert.flatMap { cert in
            try tlsKey.map { key in
                ReloadableTLSIdentity(
                    try TLSIdentity.load(certificatePath: cert, keyPath: key), certificatePath: cert, keyPath: key)
            }
        }
        let listener = PeerListener(
            endpoint: LocalEndpoint(db), databaseName: "db", host: host, tls: tls, identity: identity,
            collections: db.blipCollectionResolver())
        let started = try await listener.start()
        // SIGHUP rereads --tls-cert/--tls-key (ADR 0040): the new sync URL pins the new certificate; files that do
        // not make a usable identity are refused and the certificate in use stays.
        let directory = URL(fileURLWithPath: try database.path(root))
        let text = directory.appendingPathComponent("sync-url.txt")
        let hangups = identity == nil ? nil : Self.reloadOnHangup(listener, urlFile: text)
        defer { hangups?.cancel() }
        let qr = try QRCode(started.syncURL)
        let png = directory.appendingPathComponent("sync-url.png")
        try Data(qr.png()).write(to: png)
        // The URL as text beside its QR code, owner-only (it carries the one-time credentials), so a script or a
        // second shell can hand it to `send`: `send "$(cat DB/sync-url.txt)" FILE`.
        try Self.writeOwnerOnly(started.syncURL + "\n", to: text)
        say("sync URL: \(started.syncURL)")
        say(qr.terminalText())
        say("QR code saved as \(png.path), the URL as \(text.path)")
        for await change in db.changes where change.isExternal {
            for id in change.documentIDs { say("received \(id)") }
        }
        await listener.stop()
    }

    /// Writes `text` to `url`, readable and writable by its owner only (0600), replacing what was there.
    static func writeOwnerOnly(_ text: String, to url: URL) throws {
        try? FileManager.default.removeItem(at: url)
        guard
            FileManager.default.createFile(
                atPath: url.path, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600])
        else { throw ValidationError("cannot write \(url.path)") }
    }

    /// A SIGHUP source that reloads `listener`'s certificate files and prints the outcome; the new sync URL replaces
    /// the one in `urlFile`.
    static func reloadOnHangup(_ listener: PeerListener, urlFile: URL) -> any DispatchSourceSignal {
        signal(SIGHUP, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: SIGHUP)
        source.setEventHandler {
            Task {
                do {
                    let started = try await listener.reloadCertificate()
                    try? writeOwnerOnly(started.syncURL + "\n", to: urlFile)
                    say("certificate reloaded: \(started.fingerprint ?? "")\nsync URL: \(started.syncURL)")
                } catch {
                    say("certificate not reloaded (the one in use stays): \(error)")
                }
            }
        }
        source.resume()
        return source
    }
}

struct Send: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Store images and push only those documents to a peer's sync URL (seed 002).")
    @OptionGroup var database: DatabaseOption
    @ParentCommand var root: SetteeLiteCLI
    @Argument(help: "The peer's sync URL, as `receive` printed it (http(s)://, or ws(s):// for BLIP; ?cert= pins).")
    var url: String
    @Argument(help: "Image files to send.") var files: [String]
    @Option(help: "Attempts against an unreachable peer before giving up.")
    var maxAttempts: Int = ReplicationLimits.oneShotMaxAttempts

    func run() async throws {
        let db = try database.open(root)
        let ids = try attachImages(db, files)
        for (id, file) in zip(ids, files) { say("sending \(id)\t\(file)") }
        let options = ReplicatorOptions(continuous: false, filter: .docIDs(ids), maxAttempts: max(1, maxAttempts))
        let push: Replicator
        if url.hasPrefix("ws://") || url.hasPrefix("wss://") {
            let connector: WebSocketBLIPConnector
            do { connector = try WebSocketBLIPConnector(databaseURL: url) } catch {
                throw ValidationError("\(error)")
            }
            push = Replicator(
                blip: connector, remoteIdentity: connector.databaseURL, local: LocalEndpoint(db), role: .pushTarget,
                options: options, maxHistory: db.options.revsLimit)
        } else {
            push = Replicator(
                source: LocalEndpoint(db), target: try remoteEndpoint(url, user: nil, password: nil), options: options)
        }
        push.start()
        for await s in push.status {
            say(statusLine("send", s))
            if s.activity == .stopped { break }
        }
        let final = await push.waitUntilStopped()
        if let e = final.lastError {
            let hint =
                e.isTransient
                ? " (gave up after \(max(1, maxAttempts)) attempts: is the receiving peer still running and reachable?)"
                : ""
            FileHandle.standardError.write(Data("settee-lite: send failed: \(e)\(hint)\n".utf8))
            throw ExitCode(1)
        }
        say("sent \(final.docsWritten) document(s)")
    }
}

struct Get: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print a document, or save its attachment.")
    @OptionGroup var database: DatabaseOption
    @ParentCommand var root: SetteeLiteCLI
    @Argument var id: String
    @Option(help: "Write this attachment's bytes to --out.") var attachment: String?
    @Option(help: "Output file for --attachment.") var out: String?

    func run() async throws {
        let db = try database.open(root)
        guard let doc = try db.document(id) else { throw ValidationError("no document \(id)") }
        if let attachment {
            guard let blob = doc.attachments[attachment], let out else {
                throw ValidationError("no attachment \(attachment) (or no --out)")
            }
            try Data(try db.content(of: blob)).write(to: URL(fileURLWithPath: out))
            return
        }
        var body = doc.properties
        body.set("_id", .string(id))
        body.set("_rev", doc.revision.map { .string($0.description) })
        // Attachments as CouchDB stubs (name, type, length, digest): the bytes are one --attachment away.
        if !doc.attachments.isEmpty {
            let stubs: [(String, JSON)] = doc.attachments.sorted { $0.key < $1.key }.map { name, blob in
                (
                    name,
                    .object([
                        ("content_type", .string(blob.contentType)), ("digest", .string(blob.digest)),
                        ("length", .number(Double(blob.length))), ("revpos", .number(Double(blob.revpos))),
                        ("stub", .bool(true)),
                    ])
                )
            }
            body.set("_attachments", .object(stubs))
        }
        say(body.text)
    }
}

/// The collection a `--collection scope.name` option names (the default collection without one).
func namedCollection(_ db: Database, _ name: String?) throws -> DatabaseCollection {
    guard let name else { return db.defaultCollection() }
    let parts = name.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
    guard parts.count == 2, let found = try db.collection(parts[1], scope: parts[0]) else {
        throw ValidationError("no collection \(name) (give it as scope.collection)")
    }
    return found
}

struct Expire: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Set when a document expires (Couchbase Lite's setDocumentExpiration): then it is purged, not replicated.")
    @OptionGroup var database: DatabaseOption
    @ParentCommand var root: SetteeLiteCLI
    @Argument(help: "The document id.") var id: String
    @Option(name: .customLong("in"), help: "Seconds from now.") var seconds: Double?
    @Option(help: "An ISO-8601 date and time, e.g. 2030-01-01T00:00:00Z (a past one purges at once).") var at: String?
    @Flag(help: "Remove the expiration.") var clear = false
    @Option(help: "The document's collection, scope.collection (default: the default collection).")
    var collection: String?

    func validate() throws {
        guard [seconds != nil, at != nil, clear].filter({ $0 }).count == 1 else {
            throw ValidationError("give one of --in SECONDS, --at DATE or --clear")
        }
        if let seconds, !seconds.isFinite { throw ValidationError("--in is a number of seconds") }
    }

    func run() async throws {
        let db = try database.open(root)
        let target = try namedCollection(db, collection)
        var date: Date?
        if let seconds { date = Date().addingTimeInterval(seconds) }
        if let at {
            guard let parsed = ISO8601DateFormatter().date(from: at) else {
                throw ValidationError("--at is an ISO-8601 date and time, e.g. 2030-01-01T00:00:00Z: \(at)")
            }
            date = parsed
        }
        try target.setDocumentExpiration(id: id, date: date)
        if let date, try target.getDocumentExpiration(id: id) == nil {
            say("\(id) expired at \(ISO8601DateFormatter().string(from: date)): purged")
        } else if let date {
            say("\(id) expires at \(ISO8601DateFormatter().string(from: date))")
        } else {
            say("\(id) does not expire")
        }
    }
}

struct Stats: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Print what the database holds as JSON: documents, tombstones, revisions, bodies, attachments, expirations, file pages."
    )
    @OptionGroup var database: DatabaseOption
    @ParentCommand var root: SetteeLiteCLI

    func run() async throws {
        let db = try database.open(root)
        say(try db.stats().json.text)
    }
}

struct Compact: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Prune revision trees, drop old revision bodies and unreferenced attachments, give free pages back; print what went."
    )
    @OptionGroup var database: DatabaseOption
    @ParentCommand var root: SetteeLiteCLI

    func run() async throws {
        let db = try database.open(root)
        let r = try db.compact()
        let figures: JSON = .object([
            ("revisions_pruned", .number(Double(r.revisionsPruned))),
            ("revision_bodies_dropped", .number(Double(r.revisionBodiesDropped))),
            ("attachments_dropped", .number(Double(r.attachmentsDropped))),
            ("attachment_bytes_dropped", .number(Double(r.attachmentBytesDropped))),
            ("page_count_before", .number(Double(r.pageCountBefore))),
            ("free_pages_before", .number(Double(r.freePagesBefore))),
            ("page_count_after", .number(Double(r.pageCountAfter))),
            ("free_pages_after", .number(Double(r.freePagesAfter))), ("page_size", .number(Double(r.pageSize))),
        ])
        say(figures.text)
    }
}
