import Logging
import SetteeCore
import SetteeJSON
import SetteeSync

// The seam between the database core and the sync function (SetteeSync).

/// Who a request runs as: SetteeSync's type, one for the gateway and the sync function. `name` nil: the
/// admin port or an import (no access checks, `require*` no-ops); `""`: the GUEST user.
public typealias UserContext = SetteeSync.UserContext

/// What the sync function decided for one revision.
struct SyncResult: Sendable, Equatable {
    var channels: Set<String> = []
    /// Principal (`jane` or `role:editor`) -> channels.
    var access: [String: Set<String>] = [:]
    /// User -> role names (without `role:`).
    var roles: [String: Set<String>] = [:]
    var expiry: UInt32? = nil
}

/// Runs the sync function for one revision. `user` nil runs as the admin.
protocol SyncRunner: Sendable {
    func run(doc: JSON, oldDoc: JSON?, user: UserContext?) async throws(GatewayError) -> SyncResult
}

/// The default sync function, `function(doc){channel(doc.channels);}`, without JavaScript.
struct DefaultSyncRunner: SyncRunner {
    func run(doc: JSON, oldDoc: JSON?, user: UserContext?) async throws(GatewayError) -> SyncResult {
        var channels = Set<String>()
        switch doc["channels"] {
        case .string(let s)?: channels.insert(s)
        case .array(let items)?:
            // As the JavaScript `channel()` checks them: a run's bound, and every name valid.
            guard items.count <= Limits.maxChannelsPerGrant else {
                throw .badRequest("Too many channels (max \(Limits.maxChannelsPerGrant))")
            }
            for case .string(let s) in items { channels.insert(s) }
        default: break
        }
        if let bad = channels.first(where: { !Names.isValidChannelName($0) }) {
            throw .badRequest("Illegal channel name \"\(bad)\"")
        }
        if channels.contains("*") { channels = ["*"] }
        return SyncResult(channels: channels)
    }
}

/// The sync runner for a database: the configured JavaScript function on SetteeSync's worker threads, or
/// (no `sync` configured) the default function evaluated in Swift, which needs no JavaScript.
func makeSyncRunner(options: DatabaseOptions, logger: Logger) throws(GatewayError) -> any SyncRunner {
    guard let source = options.syncSource, !source.allSatisfy(\.isWhitespace) else { return DefaultSyncRunner() }
    do {
        return JavaScriptSyncRunner(
            function: try SyncFunction(
                source: source, threads: max(1, options.syncThreads), heapLimitBytes: options.syncHeapLimitBytes))
    } catch {
        throw .internalError("sync function: \(error.reason)")
    }
}

/// The configured sync function (SetteeSync): rejections become the thrown status.
struct JavaScriptSyncRunner: SyncRunner {
    let function: SyncFunction

    func run(doc: JSON, oldDoc: JSON?, user: UserContext?) async throws(GatewayError) -> SyncResult {
        // A refusal is already the gateway's error: its status (400, 401, 403, 500, 503) with CouchDB's name for it.
        let o = try await function.run(doc: doc, oldDoc: oldDoc, user: user ?? .admin)
        return SyncResult(channels: o.channels, access: o.access, roles: o.roles, expiry: o.expiry)
    }
}

/// bcrypt password hashes (SetteeSync's `PasswordHash`, libxcrypt).
enum PasswordHasher {
    static func hash(_ password: String) -> String? { PasswordHash.hash(password) }

    static func verify(_ password: String, hash: String) -> Bool { PasswordHash.check(password, against: hash) }
}
