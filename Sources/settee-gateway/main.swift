import ArgumentParser
import Foundation
import Logging
import NIOCore
import SetteeCore
import SetteeGateway

/// `settee-gateway CONFIG`: the sync gateway. Thin: reads and checks the Sync Gateway 1.x config
/// (exit 1 with the offending field's path on error), opens its databases, serves the public and
/// admin REST APIs until SIGTERM/SIGINT.
@main
struct SetteeGatewayCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "settee-gateway",
        abstract: "Settee's sync gateway: the Couchbase Sync Gateway REST and replication API.",
        discussion: """
            Each database keeps its metadata in the bucket's `_sync` system XATTR, leaving every document's body \
            exactly as the application wrote it (shared bucket access, Sync Gateway 3.0's default), so SDK \
            applications can share the bucket. Set "enable_shared_bucket_access": false in a database's config \
            for Sync Gateway 1.x's layout (`_sync` inside each body).
            """)

    @Argument(help: "Sync Gateway JSON config file (backquoted strings allowed).")
    var config: String

    @Option(help: "Public API address (host:port), overriding the config's \"interface\".")
    var interface: String?

    @Option(help: "Admin API address (host:port), overriding the config's \"adminInterface\".")
    var adminInterface: String?

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: String = "info"

    @Option(help: "Seconds an HTTP connection may stay idle or dribble a request head before it is closed.")
    var idleTimeout: Double = Double(Limits.httpIdleTimeoutSeconds)

    func run() async throws {
        let level = Logger.Level(rawValue: logLevel) ?? .info
        // Every entry stays on one line whatever a client sent (LineSafeLogHandler).
        LoggingSystem.bootstrap { label in
            var handler = LineSafeLogHandler(StreamLogHandler.standardError(label: label))
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "settee.gateway")
        let parsed: GatewayConfig
        let publicAddress: ListenAddress?
        let adminAddress: ListenAddress?
        do {
            guard let data = FileManager.default.contents(atPath: config) else {
                throw ConfigError(path: "", message: "cannot read \(config)")
            }
            guard data.count <= GatewayHTTPLimits.maxConfigFile else {
                throw ConfigError(path: "", message: "larger than \(GatewayHTTPLimits.maxConfigFile) bytes")
            }
            parsed = try GatewayConfig.parse(Array(data))
            publicAddress = try interface.map { s throws(ConfigError) in try ListenAddress.parse(s, path: "--interface")
            }
            adminAddress = try adminInterface.map { s throws(ConfigError) in
                try ListenAddress.parse(s, path: "--admin-interface")
            }
        } catch {
            FileHandle.standardError.write(Data("settee-gateway: \(config): \(error)\n".utf8))
            throw ExitCode(1)
        }
        logger.info("starting", metadata: ["config": "\(config)", "databases": "\(parsed.databases.map(\.name))"])
        let server: GatewayServer
        do { server = try await GatewayServer.open(config: parsed, logger: logger) } catch {
            FileHandle.standardError.write(Data("settee-gateway: \(config): \(error)\n".utf8))
            throw ExitCode(1)
        }
        do {
            // Connection caps must fit the descriptors this process may open (raised to the hard limit).
            _ = DescriptorBudget.raiseDescriptorLimit()
            try await server.run(
                interface: publicAddress, adminInterface: adminAddress,
                idleTimeout: .milliseconds(Int64(max(0.05, min(idleTimeout, 86_400)) * 1000)))
        } catch {
            logger.critical("gateway failed", metadata: ["error": "\(error)"])
            await server.close()
            throw ExitCode(1)
        }
        logger.info("clean shutdown complete")
    }
}
