import Logging
import SetteeDocument
import SetteeJSON

// The seam between the database core and the sync function. Until SetteeSync lands this file defines
// the `UserContext` the contract names and runs no JavaScript: a revision's channels are `doc.channels`.

/// Who a request runs as. `name` nil: the admin port or an import (no access checks, `require*` no-ops);
/// `""`: the GUEST user.
public struct UserContext: Sendable, Equatable {
    public var name: String?
    public var roles: Set<String>
    public var channels: Set<String>
    public init(name: String?, roles: Set<String> = [], channels: Set<String> = []) {
        self.name = name
        self.roles = roles
        self.channels = channels
    }
}

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
            for case .string(let s) in items { channels.insert(s) }
        default: break
        }
        if channels.contains(where: { $0.contains(",") }) { throw .badRequest("Illegal channel name") }
        if channels.contains("*") { channels = ["*"] }
        return SyncResult(channels: channels)
    }
}

/// The sync runner for a database: the default one until SetteeSync's JavaScript runner is wired in.
func makeSyncRunner(options: DatabaseOptions, logger: Logger) throws(GatewayError) -> any SyncRunner {
    if options.syncSource != nil {
        logger.warning("no JavaScript sync runner in this build: channels come from doc.channels")
    }
    return DefaultSyncRunner()
}

/// Salted SHA-1 password hashes until SetteeSync's bcrypt is wired in (`sgsha1$<salt>$<digest>`).
enum PasswordHasher {
    static func hash(_ password: String) -> String {
        var rng = SystemRandomNumberGenerator()
        let salt = String(rng.next() as UInt64, radix: 16)
        return "sgsha1$" + salt + "$" + AttachmentInfo.digest(of: Array((salt + "$" + password).utf8))
    }

    static func verify(_ password: String, hash: String) -> Bool {
        let parts = hash.split(separator: "$", maxSplits: 2)
        guard parts.count == 3, parts[0] == "sgsha1" else { return false }
        let expected = Array(parts[2].utf8)
        let actual = Array(AttachmentInfo.digest(of: Array((parts[1] + "$" + password).utf8)).utf8)
        guard expected.count == actual.count else { return false }
        var diff: UInt8 = 0
        for i in expected.indices { diff |= expected[i] ^ actual[i] }
        return diff == 0
    }
}
