import NIOCore
import Synchronization

/// The per-operation counters (every GET and SET touches them) of the connections on one event loop. Each loop
/// has its own block, so two cores serving requests never write the same cache line; STAT and metrics add the
/// blocks up. The unused integers after the four counters pad the block past a 128-byte line pair, so two
/// blocks allocated side by side cannot share a line either.
final class LoopCounters: Sendable {
    let cmdGet = Atomic<Int>(0)
    let cmdSet = Atomic<Int>(0)
    let getHits = Atomic<Int>(0)
    let getMisses = Atomic<Int>(0)
    private let padding: (Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int) = (
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
    )
}

/// Node-wide counters for STAT and metrics. Relaxed atomics: they are statistics, not control state. The
/// per-operation ones are kept per event loop (`LoopCounters`, `forLoop`); the rest change once per connection
/// or per error and stay node-wide.
public final class NodeCounters: Sendable {
    public let startedAt: UInt64
    let currentConnections = Atomic<Int>(0)
    let totalConnections = Atomic<Int>(0)
    let rejectedConnections = Atomic<Int>(0)
    /// One block per event loop that has served a connection, found by the loop's identity.
    private let loops = Mutex<[ObjectIdentifier: LoopCounters]>([:])
    let protocolErrors = Atomic<Int>(0)
    let authErrors = Atomic<Int>(0)
    /// Successful SASL logins per mechanism (STAT `auth_logins_<mechanism>`): shows whether clients still send
    /// passwords with PLAIN.
    let plainLogins = Atomic<Int>(0)
    let scramSHA512Logins = Atomic<Int>(0)
    let scramSHA256Logins = Atomic<Int>(0)
    let scramSHA1Logins = Atomic<Int>(0)
    let notMyVBucket = Atomic<Int>(0)
    /// Requests for a vBucket active here answered NOT_MY_VBUCKET because the serving lease had lapsed (STAT
    /// `lease_refusals`, ADR 0124).
    let leaseRefusals = Atomic<Int>(0)
    /// Times a connection stopped reading because its unsent output was above the high-water mark.
    let outputPauses = Atomic<Int>(0)
    /// Connections closed for not authenticating (or using an open bucket) within the handshake deadline.
    let handshakeTimeouts = Atomic<Int>(0)
    /// Durable writes' timeout tasks scheduled and neither cancelled nor run to an answer: the writes waiting now.
    let durableTimeoutsScheduled = Atomic<Int>(0)

    public init(startedAt: UInt64) { self.startedAt = startedAt }

    public var connections: Int { currentConnections.load(ordering: .relaxed) }
    public var gets: Int { sum { $0.cmdGet.load(ordering: .relaxed) } }
    public var sets: Int { sum { $0.cmdSet.load(ordering: .relaxed) } }
    var getHits: Int { sum { $0.getHits.load(ordering: .relaxed) } }
    var getMisses: Int { sum { $0.getMisses.load(ordering: .relaxed) } }

    /// The block of `loop`'s connections (made on the loop's first connection; looked up once per connection).
    func forLoop(_ loop: any EventLoop) -> LoopCounters {
        loops.withLock { blocks in
            let id = ObjectIdentifier(loop)
            if let block = blocks[id] { return block }
            let block = LoopCounters()
            blocks[id] = block
            return block
        }
    }

    private func sum(_ counter: (LoopCounters) -> Int) -> Int {
        loops.withLock { blocks in blocks.values.reduce(0) { $0 &+ counter($1) } }
    }

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
