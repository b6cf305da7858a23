import Foundation
import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import HummingbirdWebSocket
import Logging
import NIOCore
import NIOSSL
import ServiceLifecycle
import SetteeAuth
import SetteeCore
import SetteeDiagnostics
import SetteeHTTPServer
import SetteeJSON
import SetteeTLS
import Synchronization
import UnixSignals

/// A database the gateway could not open at start-up (bad sync function, unreachable bucket, ...): the
/// path of the config entry at fault and why. `settee-gateway` prints it and exits 1.
public struct GatewayStartError: Error, Sendable, CustomStringConvertible {
    public var path: String
    public var message: String
    public var description: String { "\(path): \(message)" }
}

/// The sync gateway: its databases, opened from a config, served on a public and an admin listener.
///
/// Both listeners share one responder (`GatewayResponder`); the admin one runs every request as the
/// admin (`user == nil`, no access checks) and adds the admin endpoints. The admin listener is bound
/// only to `adminInterface`: it does no authentication.
public final class GatewayServer: Sendable {
    public let config: GatewayConfig
    /// Each database's primary keyspace: its default collection, or (a database whose `scopes` leave it out) its
    /// first configured collection, which answers the database-level endpoints (users, roles, sessions, `_config`).
    let databases: [String: GatewayDatabase]
    /// Every keyspace of each database (ADR 0142): one entry, `_default._default`, for a database without `scopes`.
    let keyspaces: [String: [Keyspace: GatewayDatabase]]
    /// Each database's mounted bucket, closed after its keyspaces.
    private let mounted: [String: any GatewayBucket]
    private let closedFlag = Atomic<Bool>(false)
    /// Each database's config entry in force (the file's, until `PUT /db/_config` replaces it).
    let databaseConfigs: Mutex<[String: DatabaseConfig]>
    /// Databases whose config is being changed (`changeDatabaseConfig`): one change at a time per database.
    let configChanges = Mutex<Set<String>>([])
    let logger: Logger
    /// Failed-login throttling of the public port (Basic credentials and `POST /db/_session`), per source address
    /// and per user name (`GatewayRequestContext.sourceHost`).
    let loginGuard = LoginGuard()
    /// The gateway's audit log (ADR 0148): logins on the public port and the admin port's changes. Writes to
    /// `audit_log_path` when the config gives one; tests pass an in-memory one.
    public let audit: AuditLog
    /// Password (bcrypt) checks the public port ran since start (`LoginGuard.passwordChecks`).
    var passwordChecks: Int { loginGuard.passwordChecks }
    /// Process start, in µs since the epoch (`instance_start_time`).
    let startTime: UInt64
    /// The certificate both interfaces present (`SSLCert`/`SSLKey`), reloadable while they run
    /// (`POST /_reload_certificate` on the admin interface, or SIGHUP; ADR 0040). nil: plain HTTP.
    let tls: ReloadableTLSIdentity?

    convenience init(
        config: GatewayConfig, databases: [String: GatewayDatabase], logger: Logger, tls: ReloadableTLSIdentity? = nil,
        audit: AuditLog? = nil
    ) {
        var keyspaces: [String: [Keyspace: GatewayDatabase]] = [:]
        for (name, db) in databases { keyspaces[name] = [db.keyspace: db] }
        self.init(config: config, keyspaces: keyspaces, mounted: [:], logger: logger, tls: tls, audit: audit)
    }

    init(
        config: GatewayConfig, keyspaces: [String: [Keyspace: GatewayDatabase]], mounted: [String: any GatewayBucket],
        logger: Logger, tls: ReloadableTLSIdentity?, audit: AuditLog? = nil
    ) {
        self.config = config
        self.audit =
            audit
            ?? config.auditLogPath.map {
                AuditLog(defaultDirectory: $0, settings: AuditSettings(auditdEnabled: true), logger: logger)
            } ?? AuditLog.disabled()
        self.tls = tls
        self.keyspaces = keyspaces
        self.mounted = mounted
        var databases: [String: GatewayDatabase] = [:]
        for entry in config.databases {
            guard let spaces = keyspaces[entry.name] else { continue }
            let primary = spaces[.defaultCollection] ?? entry.keyspaces.lazy.compactMap { spaces[$0.keyspace] }.first
            databases[entry.name] = primary
        }
        for (name, spaces) in keyspaces where databases[name] == nil { databases[name] = spaces.values.first }
        self.databases = databases
        self.databaseConfigs = Mutex(
            Dictionary(config.databases.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a }))
        self.logger = logger
        self.startTime = UInt64(Date().timeIntervalSince1970 * 1_000_000)
    }

    /// Opens every database of `config` (bucket, users and roles, sync function). Blocks for the
    /// embedded buckets' warm-up.
    public static func open(config: GatewayConfig, logger: Logger) async throws(GatewayStartError) -> GatewayServer {
        LogText.redactionLevel = config.logRedactionLevel
        var tls: ReloadableTLSIdentity?
        if let cert = config.sslCert, let key = config.sslKey {
            // Read before any database opens: files that cannot be read stop the start here.
            do {
                let identity = try TLSIdentity.load(certificatePath: cert, keyPath: key)
                tls = ReloadableTLSIdentity(identity, certificatePath: cert, keyPath: key, policy: config.tlsPolicy)
                logger.info("serving TLS", metadata: ["SSLCert": "\(cert)", "fingerprint": "\(identity.fingerprint)"])
            } catch {
                throw GatewayStartError(path: "SSLCert", message: "\(error)")
            }
        }
        var keyspaces: [String: [Keyspace: GatewayDatabase]] = [:]
        var mounted: [String: any GatewayBucket] = [:]
        func closeAll() async { await Self.close(keyspaces: keyspaces, mounted: mounted) }
        for db in config.databases {
            let path = "databases.\(db.name)"
            if db.unsupported != nil {
                logger.notice("ignoring unsupported options", metadata: ["db": "\(db.name)"])
            }
            let bucket: any GatewayBucket
            switch db.server {
            case .cluster(let url):
                // A settee cluster's bucket: admin-API lookup, smart client, DCP change stream (RemoteBucket).
                do {
                    bucket = try await RemoteBucket(
                        url: url, bucket: db.bucket, username: db.username, password: db.password,
                        caCertPath: db.caCertPath, collections: db.keyspaces.contains { !$0.keyspace.isDefault },
                        logger: Logger(label: "settee.gateway.\(db.name).bucket"))
                } catch {
                    await closeAll()
                    throw GatewayStartError(path: "\(path).server", message: error.description)
                }
            case .walrus:
                do { bucket = try EmbeddedBucket(server: "walrus:", name: db.bucket, logger: logger) } catch {
                    await closeAll()
                    throw GatewayStartError(path: "\(path).server", message: "cannot open walrus bucket: \(error)")
                }
            case .directory(let dir):
                do { bucket = try EmbeddedBucket(server: dir, name: db.bucket, logger: logger) } catch {
                    await closeAll()
                    throw GatewayStartError(path: "\(path).server", message: "cannot open bucket in \(dir): \(error)")
                }
            }
            mounted[db.name] = bucket
            do {
                keyspaces[db.name] = try await openKeyspaces(db, bucket: bucket)
            } catch {
                await closeAll()
                throw error
            }
            logger.info(
                "opened database",
                metadata: [
                    "db": "\(db.name)", "bucket": "\(db.bucket)", "server": "\(db.server)",
                    "keyspaces": "\(db.keyspaces.map { $0.keyspace.pathName(db: db.name) })",
                ])
        }
        return GatewayServer(config: config, keyspaces: keyspaces, mounted: mounted, logger: logger, tls: tls)
    }

    /// Opens a database's keyspaces on its mounted bucket: the default collection on the bucket itself, each named
    /// collection on a `KeyspaceBucket` (the collection's view for documents, the bucket for metadata), all linked
    /// (`KeyspaceLinks`). Config users and roles are applied by the first keyspace only (the others learn them as
    /// they learn any principal). On a failure every keyspace opened so far is closed (the mounted bucket is not).
    private static func openKeyspaces(_ db: DatabaseConfig, bucket: any GatewayBucket) async throws(GatewayStartError)
        -> [Keyspace: GatewayDatabase]
    {
        let path = "databases.\(db.name)"
        let links = db.collections == nil ? nil : KeyspaceLinks()
        var opened: [Keyspace: GatewayDatabase] = [:]
        func fail(_ error: GatewayStartError) async -> GatewayStartError {
            await Self.close(keyspaces: [db.name: opened], mounted: [:])
            return error
        }
        for (i, c) in db.keyspaces.enumerated() {
            var options = DatabaseOptions(config: db)
            options.syncSource = c.sync
            options.importFilterSource = c.importFilter
            options.keyspace = c.keyspace
            options.links = links
            if i > 0 {
                options.users = [:]
                options.roles = [:]
            }
            let keyspaceBucket: any GatewayBucket
            if c.keyspace.isDefault {
                keyspaceBucket = bucket
            } else {
                guard let remote = bucket as? RemoteBucket else {
                    throw await fail(
                        GatewayStartError(path: "\(path).scopes", message: "named collections need a cluster bucket"))
                }
                do {
                    let view = try await remote.collectionView(scope: c.keyspace.scope, name: c.keyspace.collection)
                    keyspaceBucket = KeyspaceBucket(data: view, metadata: bucket)
                } catch {
                    throw await fail(
                        GatewayStartError(
                            path: "\(path).scopes.\(c.keyspace.scope).collections.\(c.keyspace.collection)",
                            message: error.description))
                }
            }
            do {
                let database = try await GatewayDatabase(
                    options: options, bucket: keyspaceBucket,
                    logger: Logger(label: "settee.gateway.\(db.name)"))
                if db.offline { await database.setOnline(false) }
                opened[c.keyspace] = database
            } catch {
                if !c.keyspace.isDefault { await keyspaceBucket.close() }
                throw await fail(
                    GatewayStartError(path: path, message: "\(error.reason) (\(error.status) \(error.error))"))
            }
        }
        return opened
    }

    /// The keyspace a request's first path segment names (`db`, `db.c`, `db.s.c`), with the database's name; nil
    /// when the database or the keyspace is not served.
    func keyspace(_ segment: String) -> (db: String, database: GatewayDatabase)? {
        guard let (db, keyspace) = Keyspace.parsePath(segment), let found = keyspaces[db]?[keyspace] else {
            return nil
        }
        return (db, found)
    }

    /// Every keyspace of database `db` (empty when there is none).
    func allKeyspaces(of db: String) -> [GatewayDatabase] {
        keyspaces[db].map { Array($0.values) } ?? []
    }

    /// Serves the public and admin APIs until SIGTERM/SIGINT (or a listener fails), then closes the
    /// databases. `onListening(admin, port)` reports each bound port. `headDeadline`: how long a client has for a
    /// request head (`Limits.httpHeadDeadlineSeconds`, never more than `idleTimeout`).
    public func run(
        interface: ListenAddress? = nil, adminInterface: ListenAddress? = nil,
        idleTimeout: TimeAmount = .seconds(Limits.httpIdleTimeoutSeconds),
        headDeadline: TimeAmount = .seconds(Limits.httpHeadDeadlineSeconds),
        onListening: @escaping @Sendable (_ admin: Bool, _ port: Int) async -> Void = { _, _ in }
    ) async throws {
        let publicAddress = interface ?? config.interface
        let adminAddress = adminInterface ?? config.adminInterface
        // SSLCert/SSLKey: both interfaces answer TLS only (as Sync Gateway 1.x does).
        let adminApp: any Service
        let publicApp: any Service
        do {
            // One configuration for both: each handshake gets the identity current then (a reload swaps it).
            let tls = self.tls?.serverConfiguration()
            adminApp = try makeApplication(
                admin: true, address: adminAddress, idleTimeout: idleTimeout, headDeadline: headDeadline, tls: tls,
                onListening: onListening)
            publicApp = try makeApplication(
                admin: false, address: publicAddress, idleTimeout: idleTimeout, headDeadline: headDeadline, tls: tls,
                onListening: onListening)
        } catch {
            await close()
            throw error
        }
        // Graceful shutdown runs in reverse order: first every database goes offline, which ends the
        // waiting feeds (longpoll, continuous, websocket) the listeners would otherwise wait for; then the
        // listeners drain. A listener failing (port taken) ends the group, and the gateway, with an error.
        let group = ServiceGroup(
            configuration: .init(
                services: [publicApp, adminApp, FeedCloser(server: self), CertificateReloadOnHangup(server: self)],
                gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        do { try await group.run() } catch {
            await close()
            throw error
        }
        await close()
    }

    /// Closes every database, then its bucket: a walrus bucket's temporary directory is removed and a file-backed
    /// bucket's engine shuts down (what was written is persisted and the file marked cleanly shut down), instead of
    /// being left to the process's exit. Runs once; later calls return at once.
    public func close() async {
        guard !closedFlag.exchange(true, ordering: .acquiringAndReleasing) else { return }
        // The audit writer finishes what is queued, waited for on a thread of its own (never the cooperative pool).
        let audit = self.audit
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            Thread {
                audit.shutdown()
                done.resume()
            }.start()
        }
        if mounted.isEmpty {
            // Built from databases alone (tests): each database's bucket is its own.
            for db in databases.values {
                await db.close()
                await db.bucket.close()
            }
            return
        }
        await Self.close(keyspaces: keyspaces, mounted: mounted)
    }

    /// Closes each keyspace, then a named collection's `KeyspaceBucket` (its view), then each mounted bucket (also
    /// what a failed start had opened).
    private static func close(
        keyspaces: [String: [Keyspace: GatewayDatabase]], mounted: [String: any GatewayBucket]
    ) async {
        for spaces in keyspaces.values {
            for (keyspace, db) in spaces {
                await db.close()
                if !keyspace.isDefault { await db.bucket.close() }
            }
        }
        for bucket in mounted.values { await bucket.close() }
    }

    func makeApplication(
        admin: Bool, address: ListenAddress, idleTimeout: TimeAmount,
        headDeadline: TimeAmount = .seconds(Limits.httpHeadDeadlineSeconds), tls: TLSConfiguration? = nil,
        onListening: @escaping @Sendable (Bool, Int) async -> Void
    ) throws -> some ApplicationProtocol {
        let responder = GatewayResponder(server: self, admin: admin)
        let label = admin ? "settee.gateway.admin" : "settee.gateway.public"
        // Idle timeout, header-size bound, request-head deadline and 400-on-parse-error (HeadDeadlineChildChannel,
        // shared with the node's HTTP ports), and a connection cap per port: see Limits.
        let http1 = HTTP1Channel.Configuration(
            idleTimeout: idleTimeout,
            httpDecoderConfiguration: .init(
                maxHeaderFieldSize: Limits.maxHTTPHeaderBytes, maxHeaderListSize: Limits.maxHTTPHeaderBytes))
        // With TLS, the handshake runs first and inside the same head deadline and connection cap. A websocket
        // upgrade ends the head timing for its connection (frames are not heads).
        let deadline = HeadDeadline.effective(headDeadline, idleTimeout: idleTimeout)
        // A BLIP frame (`/_blipsync`) is one WebSocket message of up to 16 KiB of data plus its header, and some
        // clients (pythonblip) send a whole message as one frame: the transport's frame bound, not the library's 16 KiB.
        let webSocket = WebSocketServerConfiguration(maxFrameSize: Limits.blipMaxFrameBytes)
        let plain = HTTPServerBuilder { respond in
            UpgradeRefusalChildChannel(
                inner: HeadDeadlineChildChannel(
                    inner: HTTP1WebSocketUpgradeChannel(
                        responder: respond, configuration: .init(http1: http1, ws: webSocket),
                        shouldUpgrade: { request, channel, _ in
                            await responder.shouldUpgrade(
                                request, source: LoginGuard.sourceHost(channel.remoteAddress?.description),
                                channel: channel)
                        }),
                    headDeadline: deadline, upgradable: true))
        }
        let server = try tls.map { try HTTPServerBuilder.tls(plain, tlsConfiguration: $0) } ?? plain
        let cap = admin ? Limits.gatewayMaxAdminConnections : Limits.gatewayMaxPublicConnections
        return Application(
            responder: responder,
            server: server,
            configuration: ApplicationConfiguration(
                address: .hostname(address.host, port: address.port), serverName: nil,
                availableConnectionsDelegate: ConnectionCap(cap, logger: Logger(label: label))),
            onServerRunning: { channel in
                let port = channel.localAddress?.port ?? address.port
                Logger(label: label).info("listening", metadata: ["address": "\(address.host):\(port)"])
                await onListening(admin, port)
            },
            logger: Logger(label: label))
    }
}

/// Takes every database offline when graceful shutdown starts (see `GatewayServer.run`).
struct FeedCloser: Service {
    let server: GatewayServer

    func run() async throws {
        try? await gracefulShutdown()
        for spaces in server.keyspaces.values { for db in spaces.values { await db.setOnline(false) } }
    }
}

extension DatabaseOptions {
    /// The options of a config file's database entry.
    public init(config db: DatabaseConfig) {
        var users: [String: JSON] = [:]
        for u in db.users { users[u.name] = u.body }
        var roles: [String: JSON] = [:]
        for r in db.roles { roles[r.name] = r.body }
        self.init(
            name: db.name, syncSource: db.sync, revsLimit: db.revsLimit, importDocs: db.importDocs,
            allowConflicts: db.allowConflicts, users: users, roles: roles)
        importFilterSource = db.importFilter
        eventHandlers = db.eventHandlers
        sharedBucketAccess = db.sharedBucketAccess
        deltaSync = db.deltaSync
        metaPurgeIntervalDays = db.metaPurgeIntervalDays
        compactIntervalSeconds = db.compactIntervalDays * 86_400
        localDocExpirySeconds = db.localDocExpirySeconds
        oldRevExpirySeconds = db.oldRevExpirySeconds
    }
}
