import Synchronization

/// Node-wide counters for STAT and metrics. Relaxed atomics: they are statistics, not control state.
public final class NodeCounters: Sendable {
    public let startedAt: UInt64
    let currentConnections = Atomic<Int>(0)
    let totalConnections = Atomic<Int>(0)
    let rejectedConnections = Atomic<Int>(0)
    let cmdGet = Atomic<Int>(0)
    let cmdSet = Atomic<Int>(0)
    let getHits = Atomic<Int>(0)
    let getMisses = Atomic<Int>(0)
    let protocolErrors = Atomic<Int>(0)
    let authErrors = Atomic<Int>(0)
    /// Successful SASL logins per mechanism (STAT `auth_logins_<mechanism>`): shows whether clients still send
    /// passwords with PLAIN.
    let plainLogins = Atomic<Int>(0)
    let scramSHA512Logins = Atomic<Int>(0)
    let scramSHA256Logins = Atomic<Int>(0)
    let scramSHA1Logins = Atomic<Int>(0)
    let notMyVBucket = Atomic<Int>(0)
    /// Times a connection stopped reading because its unsent output was above the high-water mark.
    let outputPauses = Atomic<Int>(0)
    /// Connections closed for not authenticating (or using an open bucket) within the handshake deadline.
    let handshakeTimeouts = Atomic<Int>(0)

    public init(startedAt: UInt64) { self.startedAt = startedAt }

    public var connections: Int { currentConnections.load(ordering: .relaxed) }
    public var gets: Int { cmdGet.load(ordering: .relaxed) }
    public var sets: Int { cmdSet.load(ordering: .relaxed) }

    /// Counts a successful login with a SASL mechanism (`SCRAM-SHA512` …, `PLAIN`).
    func countLogin(mechanism: String) {
        switch mechanism {
        case "PLAIN": plainLogins.wrappingAdd(1, ordering: .relaxed)
        case "SCRAM-SHA512": scramSHA512Logins.wrappingAdd(1, ordering: .relaxed)
        case "SCRAM-SHA256": scramSHA256Logins.wrappingAdd(1, ordering: .relaxed)
        case "SCRAM-SHA1": scramSHA1Logins.wrappingAdd(1, ordering: .relaxed)
        default: break
        }
    }

    /// STAT names and values of the login counters.
    var loginStats: [(String, String)] {
        [
            ("auth_logins_plain", plainLogins.load(ordering: .relaxed)),
            ("auth_logins_scram_sha512", scramSHA512Logins.load(ordering: .relaxed)),
            ("auth_logins_scram_sha256", scramSHA256Logins.load(ordering: .relaxed)),
            ("auth_logins_scram_sha1", scramSHA1Logins.load(ordering: .relaxed)),
        ].map { ($0.0, String($0.1)) }
    }
}
