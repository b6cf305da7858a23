import ArgumentParser
import Hummingbird
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import SetteeAdmin
import SetteeClusterMap
import SetteeCore
import SetteeDiagnostics
import SetteeHTTPServer
import SetteeNode
import SetteeRegistry
import SetteeStorage
import SetteeTLS
import SetteeViews
import SetteeViewsServer
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// `settee-server`: one data node. Thin: parses flags, opens the registry (warming up every
/// bucket), starts the KV listener and the admin HTTP API, and on SIGTERM/SIGINT flushes every
/// bucket to disk before exiting 0.
///
/// Exit codes: 0 clean shutdown; 1 bad flags or a start-up failure; 2 the node refused to start because
/// its metadata file is missing next to bucket data; 3 shutdown gave up persisting (items were lost,
/// counted in the log).
@main
struct SetteeServer: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "settee-server", abstract: "A Settee data node: memcached-binary KV + Couchbase-style admin API.")

    @Option(help: "Directory for this node's metadata and bucket files (created if absent).")
    var dataDir: String

    @Option(help: "Address to listen on.")
    var host: String = "127.0.0.1"

    @Option(help: "Admin REST API port (Couchbase's 8091).")
    var adminPort: Int = 8091

    @Option(help: "Memcached-binary KV port (Couchbase's 11210).")
    var kvPort: Int = 11210

    @Option(help: "Views port (Couchbase's 8092 capi): design documents and view queries.")
    var viewsPort: Int = 8092

    @Flag(
        help:
            "Serve TLS on the KV and admin TLS ports too. Without --tls-cert/--tls-key, a self-signed certificate is made at first start and kept (0600) in <data-dir>/tls."
    )
    var tls = false

    @Option(help: "PEM certificate chain (leaf first) for the TLS ports; implies --tls. Needs --tls-key.")
    var tlsCert: String?

    @Option(help: "PEM private key of --tls-cert.")
    var tlsKey: String?

    @Option(help: "Oldest TLS version the TLS ports accept: tlsv1.2 (default) or tlsv1.3 (Couchbase's tlsMinVersion).")
    var tlsMinVersion: String?

    @Option(
        help:
            "Comma-separated IANA names of the TLS 1.2 cipher suites offered (Couchbase's cipherSuites); default: the ECDHE suites with AES-GCM or ChaCha20-Poly1305."
    )
    var tlsCipherSuites: String?

    @Flag(
        help:
            "With TLS, do not listen on the plain KV, admin and views ports (as Couchbase's cluster encryption level 'strict'): clients, peers and gateways use the TLS ports."
    )
    var tlsOnly = false

    @Option(help: "KV TLS port (Couchbase's 11207), served with --tls.")
    var kvTlsPort: Int = 11207

    @Option(help: "Admin HTTPS port (Couchbase's 18091), served with --tls.")
    var adminTlsPort: Int = 18091

    @Option(help: "Views HTTPS port (Couchbase's 18092, capiSSL), served with --tls.")
    var viewsTlsPort: Int = 18092

    @Option(help: "Node name; defaults to n_<admin-port>@<host>.")
    var name: String?

    @Option(help: "KV event-loop threads (default: number of cores).")
    var kvThreads: Int = System.coreCount

    @Option(
        help:
            "Nice value for each bucket's flusher and expiry threads (0-19): above 0 they give way to the KV event loops, shortening latency tails at the cost of persistence lag under saturation."
    )
    var backgroundNice: Int32 = 0

    @Option(help: "Admin console: seconds an unused log-in session lives.")
    var uiSessionTimeout: Int = Limits.consoleSessionIdleTimeoutSeconds

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: String = "info"

    @Option(help: "User data (names, keys, paths) in logs: none, partial (marked <ud>...</ud>), full (hashed).")
    var logRedactionLevel: String = "partial"

    @Option(
        help:
            "Seconds between two auto-compaction checks of this node's buckets (/settings/autoCompaction's thresholds; ns_server checks every 30)."
    )
    var autoCompactionCheckSeconds: Double = Double(Limits.autoCompactionCheckSeconds)

    @Option(help: "Seconds a KV connection has to authenticate (or use an open bucket) before it is closed.")
    var kvHandshakeTimeout: Double = Double(Limits.kvHandshakeDeadlineSeconds)

    @Option(help: "KV connections each listener accepts a second past a short burst (0: unpaced).")
    var kvAcceptRate: Int = Limits.kvAcceptsPerSecond

    @Option(help: "Seconds an admin or views HTTP connection may stay idle or dribble a request head.")
    var httpIdleTimeout: Double = Double(Limits.httpIdleTimeoutSeconds)

    @Option(
        help: ArgumentHelp(
            "Start bucket NAME in repair mode (repeatable): rows that fail verification are skipped, reported and deleted from its file; a data file that cannot be read is moved aside and the bucket starts empty.",
            valueName: "NAME"))
    var repairBucket: [String] = []

    @Option(
        help:
            "Seconds a shutdown keeps retrying to persist dirty items while the disk fails before it gives up (exit code 3)."
    )
    var shutdownPersistTimeout: Int = Limits.shutdownPersistRetrySeconds

    @Option(
        help:
            "Milliseconds plain writes wait before the flusher persists them, so one transaction carries them all (ADR 0107). Writes somebody waits for (durable writes, OBSERVE_SEQNO polls) do not wait. 0-60000."
    )
    var flusherWindowMs: Int = Limits.flusherWindowMilliseconds

    func run() async throws {
        let ownArenas = MallocArenas.giveEachThreadItsOwn()
        let level = Logger.Level(rawValue: logLevel) ?? .info
        guard let redaction = LogRedactionLevel(rawValue: logRedactionLevel) else {
            throw ValidationError("--log-redaction-level must be none, partial or full")
        }
        LogText.redactionLevel = redaction
        // Every entry stays on one line whatever a client sent (LineSafeLogHandler).
        // The recent lines are also kept in memory for `GET /logs` and logs collection (RecentLogLines, ADR 0148).
        LoggingSystem.bootstrap { label in
            var handler = LineSafeLogHandler(
                MultiplexLogHandler([
                    StreamLogHandler.standardError(label: label) as any LogHandler,
                    RecentLogLines.process.handler(label: label),
                ]))
            handler.logLevel = level
            return handler
        }
        var logger = Logger(label: "settee.server")
        logger[metadataKey: "node"] = "\(host):\(adminPort)"
        if !ownArenas {
            logger.warning("malloc refused more arenas: threads share them, and RSS per item may run higher (ADR 0108)")
        }

        let nodeName = name ?? "n_\(adminPort)@\(host)"
        var info = NodeInfo(
            otpNode: NodeID(nodeName), host: host, adminPort: adminPort, kvPort: kvPort, viewsPort: viewsPort,
            nodeUUID: "", servesViews: true)
        // Reloadable without a restart (POST /node/controller/reloadCertificate, ADR 0038): every TLS listener takes
        // its configuration from it, so new connections get whatever certificate it holds at their handshake.
        let identity = try tlsIdentity(logger: logger)
        if tlsOnly && identity == nil { throw ValidationError("--tls-only needs --tls or --tls-cert/--tls-key") }
        if let identity {
            // Advertised as nodesExt kvSSL/mgmtSSL; peers pin the fingerprint for node-to-node traffic.
            info.kvTLSPort = kvTlsPort
            info.adminTLSPort = adminTlsPort
            info.viewsTLSPort = viewsTlsPort
            info.tlsFingerprint = identity.fingerprint
        }
        logger.info("starting; warming up buckets", metadata: ["dataDir": "\(dataDir)"])
        BackgroundPriority.nice.store(max(0, min(19, backgroundNice)), ordering: .relaxed)
        var engineOptions = EngineOptions()
        engineOptions.shutdownPersistTimeout = Double(max(0, shutdownPersistTimeout))
        guard (0...60_000).contains(flusherWindowMs) else {
            throw ValidationError("--flusher-window-ms must be 0-60000")
        }
        engineOptions.flusherMaxDelay = Double(flusherWindowMs) / 1_000
        // The cluster manager releases or hands over active vBuckets an unclean shutdown leaves (ADR 0033).
        engineOptions.holdAfterUncleanShutdown = true
        let registry: NodeRegistry
        do {
            registry = try NodeRegistry(
                dataDirectory: dataDir, node: info, engineOptions: engineOptions, repairBuckets: Set(repairBucket),
                logger: Logger(label: "settee.registry"))
        } catch RegistryError.metadataMissing(let message) {
            logger.critical("refusing to start: \(message)")
            throw ExitCode(2)
        }
        for name in repairBucket where registry.bucketSettings(named: name) == nil {
            logger.warning("--repair-bucket names no bucket of this node", metadata: ["bucket": "\(name)"])
        }

        let group = MultiThreadedEventLoopGroup(numberOfThreads: max(1, kvThreads))
        // Per-port connection caps, scaled to the descriptors this process may open (raised to the hard limit).
        let descriptors = DescriptorBudget.raiseDescriptorLimit()
        let caps = DescriptorBudget.fit(
            [Limits.maxConnections, Limits.maxAdminConnections, Limits.maxViewsConnections],
            descriptorLimit: descriptors)
        logger.info(
            "connection caps",
            metadata: [
                "descriptors": "\(descriptors)", "kv": "\(caps[0])", "admin": "\(caps[1])", "views": "\(caps[2])",
            ])
        let httpIdle = TimeAmount.milliseconds(Int64(max(0.05, min(httpIdleTimeout, 86_400)) * 1000))
        // Connections each HTTP port closes without answering, by reason (`/metrics`).
        let closes = (
            admin: UnansweredCloseCounts(), adminTLS: UnansweredCloseCounts(), views: UnansweredCloseCounts(),
            viewsTLS: UnansweredCloseCounts()
        )
        let node = KVNode(
            registry: registry, logger: Logger(label: "settee.kv"),
            handshakeDeadline: .milliseconds(Int64(max(0, min(kvHandshakeTimeout, 86_400)) * 1000)),
            maxConnections: caps[0], acceptsPerSecond: max(0, min(kvAcceptRate, 1_000_000)))
        var kv: KVServer?
        if !tlsOnly {
            do {
                kv = try await KVServer.start(node: node, host: host, port: kvPort, group: group)
            } catch {
                logger.critical("cannot listen for KV on \(host):\(kvPort): \(error)")
                throw ExitCode(1)
            }
            logger.info("KV listening", metadata: ["port": "\(kvPort)"])
        }
        var kvTLS: KVServer?
        if let identity {
            do {
                let context = try NIOSSLContext(configuration: identity.serverConfiguration())
                kvTLS = try await KVServer.start(node: node, host: host, port: kvTlsPort, group: group, tls: context)
            } catch {
                logger.critical("cannot listen for KV over TLS on \(host):\(kvTlsPort): \(error)")
                throw ExitCode(1)
            }
            logger.info("KV TLS listening", metadata: ["port": "\(kvTlsPort)"])
        }
        // Replica streams and majority durability: each node follows the placement it holds. Node-to-node DCP
        // logs in with the cluster's internal credentials.
        let replication = ReplicationManager(
            registry: registry, node: registry.node, group: group,
            credentials: { registry.internalCredentials }, logger: Logger(label: "settee.replication"))
        node.setReplication(replication)
        // Config changes become replica streams to start or stop, and drops of copies no longer held.
        ReplicationFollower(registry: registry, replication: replication, logger: Logger(label: "settee.replication"))
            .start()

        // Views (capi port): indexes of existing design documents resume in the background.
        let views = NodeViews(registry: registry, logger: Logger(label: "settee.views"))
        views.openAll()
        // The plain views port unless --tls-only; the views TLS port (capiSSL) with TLS, from the same reloadable
        // identity as the other TLS ports (ADR 0040). Both share the views connection cap's budget.
        var viewsTasks: [Task<Void, any Error>] = []
        if !tlsOnly {
            let viewsApp = ViewsServer.makeApplication(
                views: views, host: host, port: viewsPort, logger: Logger(label: "settee.views"),
                idleTimeout: httpIdle, maxConnections: caps[2],
                server: AdminServer.plainServer(idleTimeout: httpIdle, closes: closes.views),
                onListening: { port in
                    Logger(label: "settee.views").info("views API listening", metadata: ["port": "\(port)"])
                })
            let viewsAddress = "\(host):\(viewsPort)"
            viewsTasks.append(
                Task {
                    do { try await viewsApp.run() } catch {
                        Logger(label: "settee.views").critical("views API failed on \(viewsAddress): \(error)")
                        throw error
                    }
                })
        }
        if let identity {
            let viewsTLSApp = ViewsServer.makeApplication(
                views: views, host: host, port: viewsTlsPort, logger: Logger(label: "settee.views"),
                idleTimeout: httpIdle, maxConnections: caps[2],
                server: try AdminServer.tlsServer(
                    idleTimeout: httpIdle, tls: identity.serverConfiguration(), closes: closes.viewsTLS),
                onListening: { port in
                    Logger(label: "settee.views").info("views HTTPS listening", metadata: ["port": "\(port)"])
                })
            let viewsTLSAddress = "\(host):\(viewsTlsPort)"
            viewsTasks.append(
                Task {
                    do { try await viewsTLSApp.run() } catch {
                        Logger(label: "settee.views").critical("views HTTPS failed on \(viewsTLSAddress): \(error)")
                        throw error
                    }
                })
        }

        let cluster = ClusterManager(registry: registry, logger: Logger(label: "settee.cluster"))
        let heartbeat = Task { await cluster.run() }
        // After a certificate reload, until the cluster document pins the new certificate.
        let certificateWatch = Task { await cluster.keepServedFingerprintPublished() }
        // A binary FLUSH (memccapable -b, old SDKs) is the same cluster-wide flush as REST doFlush.
        node.setBucketFlush { name in
            switch await cluster.flushBucket(name) {
            case .success: return .flushed
            case .failure(.notFound): return .notFound
            case .failure(.disabled): return .disabled
            case .failure(.rebalanceRunning): return .rebalanceRunning
            case .failure(.failed(let why)): return .failed(why)
            }
        }
        let counters = node.counters
        let console = ConsoleOptions(
            sessions: ConsoleSessions(adminPort: adminPort, idleTimeout: .seconds(max(1, uiSessionTimeout))),
            metrics: NodeMetrics(
                registry: registry, peerCalls: cluster.peerCalls,
                httpCloses: [
                    ("admin", closes.admin), ("admin_tls", closes.adminTLS), ("views", closes.views),
                    ("views_tls", closes.viewsTLS),
                ],
                peerTrust: [("admin", cluster.peerTrustCounts), ("views", views.peerTrustCounts)], views: views
            ) {
                NodeMetrics.KVSample(connections: counters.connections, gets: counters.gets, sets: counters.sets)
            })
        let compactions = BucketCompactions(views: views, logger: Logger(label: "settee.admin"))
        let adminRouter = AdminServer.makeRouter(
            registry: registry, logger: Logger(label: "settee.admin"), cluster: cluster, console: console,
            tls: identity, views: views, compactions: compactions)
        let autoCompaction = Task {
            await AutoCompactionChecks(
                registry: registry, compactions: compactions,
                interval: .milliseconds(Int(max(0.05, autoCompactionCheckSeconds) * 1000)),
                logger: Logger(label: "settee.admin")
            ).run()
        }
        // The admin HTTPS port serves the same router (its cookies marked Secure); it shares the admin connection
        // cap's budget. The first of the two apps runs the service (signals); with --tls-only it is the only one.
        var adminApps: [(app: any ApplicationProtocol, address: String)] = []
        if !tlsOnly {
            let app = AdminServer.makeApplication(
                router: adminRouter, host: host, port: adminPort, logger: Logger(label: "settee.admin"),
                server: AdminServer.plainServer(idleTimeout: httpIdle, closes: closes.admin), maxConnections: caps[1],
                onListening: { port in
                    Logger(label: "settee.admin").info("admin API listening", metadata: ["port": "\(port)"])
                })
            adminApps.append((app, "\(host):\(adminPort)"))
        }
        if let identity {
            let tlsApp = AdminServer.makeApplication(
                router: SecureCookies(adminRouter), host: host, port: adminTlsPort,
                logger: Logger(label: "settee.admin"),
                server: try AdminServer.tlsServer(
                    idleTimeout: httpIdle, tls: identity.serverConfiguration(), closes: closes.adminTLS),
                maxConnections: caps[1],
                onListening: { port in
                    Logger(label: "settee.admin").info("admin HTTPS listening", metadata: ["port": "\(port)"])
                })
            adminApps.append((tlsApp, "\(host):\(adminTlsPort)"))
        }
        var adminTLSTask: Task<Void, any Error>?
        if adminApps.count > 1 {
            let (tlsApp, address) = adminApps[1]
            adminTLSTask = Task {
                do { try await tlsApp.run() } catch {
                    Logger(label: "settee.admin").critical("admin HTTPS failed on \(address): \(error)")
                    throw error
                }
            }
        }
        // A node whose admin API cannot run (its port is taken, say) is not a node: it shuts down and exits 1.
        var adminFailed = false
        do {
            // Returns on SIGTERM/SIGINT after the HTTP server has shut down gracefully.
            try await adminApps[0].app.runService()
        } catch {
            logger.critical("admin API failed on \(adminApps[0].address): \(error)")
            adminFailed = true
        }
        logger.info("shutting down: closing KV listener and flushing every bucket")
        heartbeat.cancel()
        certificateWatch.cancel()
        autoCompaction.cancel()
        _ = await autoCompaction.result
        for task in viewsTasks { task.cancel() }
        for task in viewsTasks { _ = await task.result }
        adminTLSTask?.cancel()
        _ = await adminTLSTask?.result
        views.shutdown()
        await cluster.shutdown()
        await replication.shutdown()
        await kv?.close()
        await kvTLS?.close()
        let lost = registry.shutdown()
        node.shutdownPool()
        try? await group.shutdownGracefully()
        if !lost.isEmpty {
            let total = lost.values.reduce(0, &+)
            let perBucket = lost.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",")
            logger.critical(
                "shutdown complete, but unpersisted items were lost: the disk could not persist them",
                metadata: ["lostItems": "\(total)", "buckets": "\(perBucket)"])
            throw ExitCode(3)
        }
        if adminFailed { throw ExitCode(1) }
        logger.info("clean shutdown complete")
    }

    /// The identity the TLS ports present: the operator's PEM files, or with `--tls` alone the node's own
    /// self-signed certificate (made at first start for `--host`, kept in `<data-dir>/tls`), with the files a reload
    /// rereads. Nil: no TLS.
    private func tlsIdentity(logger: Logger) throws -> ReloadableTLSIdentity? {
        let policy: TLSPolicy
        do {
            policy = try TLSPolicy.parse(
                minimumVersion: tlsMinVersion,
                cipherSuites: tlsCipherSuites.map {
                    $0.split(separator: ",").map { String($0.filter { !$0.isWhitespace }) }
                })
        } catch {
            throw ValidationError("\(error)")
        }
        if tlsCert != nil || tlsKey != nil {
            guard let tlsCert, let tlsKey else { throw ValidationError("--tls-cert and --tls-key go together") }
            let identity = try TLSIdentity.load(certificatePath: tlsCert, keyPath: tlsKey)
            logger.info("TLS certificate", metadata: ["file": "\(tlsCert)", "fingerprint": "\(identity.fingerprint)"])
            return ReloadableTLSIdentity(identity, certificatePath: tlsCert, keyPath: tlsKey, policy: policy)
        }
        guard tls else { return nil }
        let directory = dataDir + "/tls"
        let identity = try TLSIdentity.loadOrCreateSelfSigned(directory: directory, hosts: [host])
        logger.info(
            "TLS self-signed certificate",
            metadata: ["file": "\(identity.source)", "fingerprint": "\(identity.fingerprint)"])
        return ReloadableTLSIdentity(
            identity, certificatePath: directory + "/cert.pem", keyPath: directory + "/key.pem", policy: policy)
    }
}

/// The node's views as the admin API's compactions and bucket stats see them (ADR 0154). A bucket whose views cannot
/// be opened has no index files to show.
extension NodeViews: ViewIndexFiles {
    public func indexedDesignDocuments(bucket: String) -> [String] {
        (try? views(bucket: bucket))?.indexedDesignDocuments ?? []
    }

    public func diskFigures(bucket: String, designDocument: String) -> DiskFigures? {
        (try? views(bucket: bucket))?.index(named: designDocument)?.diskFigures()
    }

    public func diskFigures(bucket: String) -> DiskFigures {
        (try? views(bucket: bucket))?.diskFigures() ?? DiskFigures()
    }

    public func compactStep(
        bucket: String, designDocument: String, maxPages: Int
    ) throws -> (released: Int, remaining: Int) {
        guard let index = try views(bucket: bucket).index(named: designDocument) else {
            // Deleted since the run started: nothing left to give back.
            return (0, 0)
        }
        return try index.compactStep(maxPages: maxPages)
    }
}
